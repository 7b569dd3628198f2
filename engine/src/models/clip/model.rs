//! CLIP as transformers' `CLIPModel` computes it, with its parameter names:
//!
//! - text: token + position embeddings → causal pre-norm blocks → final LayerNorm → the row of
//!   each text's end token → `text_projection`;
//! - vision: [CLS] + patches + position table → `pre_layrnorm` → pre-norm blocks → the [CLS]
//!   row through `post_layernorm` → `visual_projection`;
//! - scores: cosine similarity of the two embeddings times `exp(logit_scale)`.

use super::config::{ClipConfig, ClipTextConfig, ClipVisionConfig, TextPooling};
use crate::models::encoder_block::{self, check_images, EncoderBlock, CLIP_NAMES};
use crate::models::patch_embedding::{embed_patches, param, patch_conv, Resample};
use crate::nn::{Conv2d, Embedding, LayerNorm, Linear, Module};
use crate::{DType, Error, Generator, Result, Tensor};

/// `text_model.*`: CLIP's text tower, or SigLIP's (bidirectional, last-position pooling and a
/// `head`).
pub struct TextTower {
    pub config: ClipTextConfig,
    token_embedding: Embedding,
    position_embedding: Embedding,
    layers: Vec<EncoderBlock>,
    final_layer_norm: LayerNorm,
    head: Option<Linear>,
    training: bool,
}

/// A tower's output: every position's states and the pooled row.
pub struct TowerOutput {
    pub last_hidden_state: Tensor,
    pub pooler_output: Tensor,
    /// The embeddings' output and each layer's, layers + 1 entries (transformers'
    /// `output_hidden_states`): SDXL reads the second to last, before the final norm.
    pub hidden_states: Vec<Tensor>,
}

impl TextTower {
    pub fn new(config: ClipTextConfig, gen: &mut Generator) -> Result<TextTower> {
        let d = config.tower.hidden_size;
        Ok(TextTower {
            token_embedding: Embedding::new(config.vocab_size, d, gen)?,
            position_embedding: Embedding::new(config.max_position_embeddings, d, gen)?,
            layers: encoder_block::blocks(
                config.tower.num_hidden_layers,
                &CLIP_NAMES,
                config.tower.block(config.causal),
                None,
                gen,
            )?,
            final_layer_norm: LayerNorm::new(&[d], config.tower.layer_norm_eps, true)?,
            head: config
                .head
                .map(|p| Linear::new(d, p, true, gen))
                .transpose()?,
            config,
            training: true,
        })
    }

    /// Where each row of `ids` [B, T] is pooled: its first end token, or (legacy configs with
    /// `eos_token_id` 2) its first highest id; SigLIP's last position.
    fn pooled_positions(&self, ids: &Tensor) -> Result<Vec<usize>> {
        let t = ids.shape()[1];
        let eos = match self.config.pooling {
            TextPooling::Last => return Ok(vec![t - 1; ids.shape()[0]]),
            TextPooling::EndToken(eos) => eos as i64,
        };
        let host = ids.to_vec::<i64>()?;
        Ok(host
            .chunks(t)
            .map(|row| match eos {
                2 => {
                    let max = row.iter().copied().max().unwrap_or(0);
                    row.iter().position(|&v| v == max).unwrap_or(0)
                }
                _ => row.iter().position(|&v| v == eos).unwrap_or(0),
            })
            .collect())
    }

    /// Sets the embeddings of ids `first..first + rows` to `rows` [n, width], growing the table
    /// with zero rows where it is shorter (textual inversion's new tokens).
    pub fn set_token_embeddings(&mut self, first: usize, rows: &Tensor) -> Result<()> {
        let old = &self.token_embedding.weight;
        let (have, d) = (old.shape()[0], old.shape()[1]);
        let n = rows.shape()[0];
        if rows.rank() != 2 || rows.shape()[1] != d {
            return Err(Error::invalid(
                "CLIP text",
                format!("token embeddings must be [n, {d}], got {:?}", rows.shape()),
            ));
        }
        let rows = rows.to_dtype(old.dtype())?.to_device(old.device())?;
        let weight = crate::no_grad(|| {
            let base = match have < first + n {
                true => Tensor::cat(
                    &[
                        old.clone(),
                        Tensor::zeros(&[first + n - have, d], old.dtype(), old.device())?,
                    ],
                    0,
                )?,
                false => old.clone(),
            };
            let total = base.shape()[0];
            let mut parts = vec![base.narrow(0, 0, first)?, rows];
            if first + n < total {
                parts.push(base.narrow(0, first + n, total - first - n)?);
            }
            Tensor::cat(&parts, 0)?.contiguous()
        })?;
        if old.requires_grad() {
            weight.set_requires_grad(true)?;
        }
        self.token_embedding.weight = weight;
        self.config.vocab_size = self.config.vocab_size.max(first + n);
        Ok(())
    }

    /// Token ids [B, T] (T at most `max_position_embeddings`, right-padded).
    pub fn run(&self, ids: &Tensor) -> Result<TowerOutput> {
        let c = &self.config;
        let ok = ids.rank() == 2
            && !ids.dtype().is_float()
            && ids.shape()[1] > 0
            && ids.shape()[1] <= c.max_position_embeddings;
        if !ok {
            return Err(Error::invalid(
                "CLIP text",
                format!(
                    "expects integer token ids [B, T] with 1 <= T <= {}, got {} {:?}",
                    c.max_position_embeddings,
                    ids.dtype(),
                    ids.shape()
                ),
            ));
        }
        let (b, t) = (ids.shape()[0], ids.shape()[1]);
        let positions = self.position_embedding.weight.narrow(0, 0, t)?;
        let mut h = self.token_embedding.forward(ids)?.add(&positions)?;
        let mut hidden_states = vec![h.clone()];
        for layer in &self.layers {
            h = layer.forward(&h)?;
            hidden_states.push(h.clone());
        }
        let h = self.final_layer_norm.forward(&h)?;
        let rows: Vec<i64> = self
            .pooled_positions(ids)?
            .into_iter()
            .enumerate()
            .map(|(i, p)| (i * t + p) as i64)
            .collect();
        let rows = Tensor::from_vec(rows, &[b])?.to_device(h.device())?;
        let d = h.shape()[2] as isize;
        let mut pooled = h.reshape(&[-1, d])?.index_select(0, &rows)?;
        if let Some(head) = &self.head {
            pooled = head.forward(&pooled)?;
        }
        Ok(TowerOutput {
            last_hidden_state: h,
            pooler_output: pooled,
            hidden_states,
        })
    }
}

impl Module for TextTower {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        Ok(self.run(ids)?.pooler_output)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("embeddings.token_embedding".into(), &self.token_embedding),
            (
                "embeddings.position_embedding".into(),
                &self.position_embedding,
            ),
        ];
        for (i, layer) in self.layers.iter().enumerate() {
            c.push((format!("encoder.layers.{i}"), layer));
        }
        c.push(("final_layer_norm".into(), &self.final_layer_norm));
        if let Some(head) = &self.head {
            c.push(("head".into(), head));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> =
            vec![&mut self.token_embedding, &mut self.position_embedding];
        for layer in &mut self.layers {
            c.push(layer);
        }
        c.push(&mut self.final_layer_norm);
        if let Some(head) = &mut self.head {
            c.push(head);
        }
        c
    }

    crate::nn::training_field!();
}

/// `vision_model.*`.
pub struct VisionTower {
    pub config: ClipVisionConfig,
    /// [D].
    class_embedding: Tensor,
    patch_embedding: Conv2d,
    /// [1 + patches, D].
    position_embedding: Embedding,
    pre_layrnorm: LayerNorm,
    layers: Vec<EncoderBlock>,
    post_layernorm: LayerNorm,
    training: bool,
}

impl VisionTower {
    fn new(config: ClipVisionConfig, gen: &mut Generator) -> Result<VisionTower> {
        let (d, eps) = (config.tower.hidden_size, config.tower.layer_norm_eps);
        let positions = config.grid() * config.grid() + 1;
        Ok(VisionTower {
            class_embedding: param(&[d], gen)?,
            patch_embedding: patch_conv(config.num_channels, d, config.patch_size, false, gen)?,
            position_embedding: Embedding::new(positions, d, gen)?,
            pre_layrnorm: LayerNorm::new(&[d], eps, true)?,
            layers: encoder_block::blocks(
                config.tower.num_hidden_layers,
                &CLIP_NAMES,
                config.tower.block(false),
                None,
                gen,
            )?,
            post_layernorm: LayerNorm::new(&[d], eps, true)?,
            config,
            training: true,
        })
    }

    /// Images [B, C, H, W]; another size than the configured one resamples the position table.
    /// `last_hidden_state` is the encoder's output (before `post_layernorm`), as transformers
    /// returns it.
    pub fn run(&self, images: &Tensor) -> Result<TowerOutput> {
        let c = &self.config;
        check_images("CLIP vision", images, c.num_channels, c.patch_size)?;
        let table = self.position_embedding.weight.unsqueeze(0)?;
        let cls = &self.class_embedding;
        let x = embed_patches(
            &self.patch_embedding,
            images,
            &[cls],
            &table,
            Resample::Bicubic,
        )?;
        let mut h = self.pre_layrnorm.forward(&x)?;
        let mut hidden_states = vec![h.clone()];
        for layer in &self.layers {
            h = layer.forward(&h)?;
            hidden_states.push(h.clone());
        }
        let pooled = self
            .post_layernorm
            .forward(&h.narrow(1, 0, 1)?.squeeze(1)?)?;
        Ok(TowerOutput {
            last_hidden_state: h,
            pooler_output: pooled,
            hidden_states,
        })
    }
}

impl Module for VisionTower {
    fn forward(&self, images: &Tensor) -> Result<Tensor> {
        Ok(self.run(images)?.pooler_output)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        vec![(
            "embeddings.class_embedding".into(),
            self.class_embedding.clone(),
        )]
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("embeddings.patch_embedding".into(), &self.patch_embedding),
            (
                "embeddings.position_embedding".into(),
                &self.position_embedding,
            ),
            ("pre_layrnorm".into(), &self.pre_layrnorm),
        ];
        for (i, layer) in self.layers.iter().enumerate() {
            c.push((format!("encoder.layers.{i}"), layer));
        }
        c.push(("post_layernorm".into(), &self.post_layernorm));
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![
            &mut self.patch_embedding,
            &mut self.position_embedding,
            &mut self.pre_layrnorm,
        ];
        for layer in &mut self.layers {
            c.push(layer);
        }
        c.push(&mut self.post_layernorm);
        c
    }

    crate::nn::training_field!();
}

/// `CLIPModel`: both towers, their projections into the joint space, and the temperature.
pub struct Clip {
    pub config: ClipConfig,
    pub text: TextTower,
    pub vision: VisionTower,
    text_projection: Linear,
    visual_projection: Linear,
    /// A scalar: the scores are multiplied by its exponential.
    logit_scale: Tensor,
    /// Reads prompts for `embed_texts`; `None` for a folder without tokenizer files.
    pub tokenizer: Option<crate::models::prompt_tokenizer::PromptTokenizer>,
    /// The checkpoint's image preprocessing, when loaded from a folder that has one.
    pub processor: Option<crate::vision::ImageProcessor>,
    training: bool,
}

impl Clip {
    pub fn new(config: ClipConfig, gen: &mut Generator) -> Result<Clip> {
        let p = config.projection_dim;
        let text = TextTower::new(config.text.clone(), gen)?;
        let vision = VisionTower::new(config.vision.clone(), gen)?;
        Ok(Clip {
            text_projection: Linear::new(config.text.tower.hidden_size, p, false, gen)?,
            visual_projection: Linear::new(config.vision.tower.hidden_size, p, false, gen)?,
            logit_scale: Tensor::full(
                config.logit_scale_init_value,
                &[],
                DType::F32,
                crate::Device::Cpu,
            )?
            .requires_grad_()?,
            text,
            vision,
            config,
            tokenizer: None,
            processor: None,
            training: true,
        })
    }

    /// Images [B, C, H, W] → their embeddings [B, projection_dim] (not normalised, as
    /// transformers' `get_image_features`).
    pub fn image_features(&self, images: &Tensor) -> Result<Tensor> {
        self.visual_projection
            .forward(&self.vision.run(images)?.pooler_output)
    }

    /// Token ids [B, T] → their embeddings [B, projection_dim] (not normalised).
    pub fn text_features(&self, ids: &Tensor) -> Result<Tensor> {
        self.text_projection
            .forward(&self.text.run(ids)?.pooler_output)
    }

    /// `logits_per_image` [images, texts]: cosine similarities times `exp(logit_scale)`.
    pub fn scores(&self, image_features: &Tensor, text_features: &Tensor) -> Result<Tensor> {
        cosine_scores(image_features, text_features, &self.logit_scale)
    }

    pub fn logit_scale(&self) -> &Tensor {
        &self.logit_scale
    }
}

/// Cosine similarities of image rows [I, D] and text rows [T, D], times `exp(log_scale)`:
/// [I, T].
pub fn cosine_scores(images: &Tensor, texts: &Tensor, log_scale: &Tensor) -> Result<Tensor> {
    let unit =
        |x: &Tensor| -> Result<Tensor> { x.div(&x.square()?.sum_dims(&[-1], true)?.sqrt()?) };
    let scale = log_scale.exp()?.to_dtype(images.dtype())?;
    unit(images)?.matmul(&unit(texts)?.t()?)?.mul(&scale)
}

impl Module for Clip {
    /// Images → their joint-space embeddings.
    fn forward(&self, images: &Tensor) -> Result<Tensor> {
        self.image_features(images)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("logit_scale".into(), self.logit_scale.clone())]
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("text_model".into(), &self.text),
            ("vision_model".into(), &self.vision),
            ("visual_projection".into(), &self.visual_projection),
            ("text_projection".into(), &self.text_projection),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![
            &mut self.text,
            &mut self.vision,
            &mut self.visual_projection,
            &mut self.text_projection,
        ]
    }

    crate::nn::training_field!();

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn title(&self) -> String {
        let (t, v) = (&self.config.text, &self.config.vision);
        format!(
            "CLIP(vision: patch {}, {} layers, width {}; text: {} layers, width {}; embedding {})",
            v.patch_size,
            v.tower.num_hidden_layers,
            v.tower.hidden_size,
            t.tower.num_hidden_layers,
            t.tower.hidden_size,
            self.config.projection_dim
        )
    }

    fn input_shape(&self) -> Option<Vec<usize>> {
        let v = &self.config.vision;
        Some(vec![1, v.num_channels, v.image_size, v.image_size])
    }
}
