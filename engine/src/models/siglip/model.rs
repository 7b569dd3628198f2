//! SigLIP as transformers' `SiglipModel` computes it, with its parameter names:
//!
//! - vision: patches + position table (no class token) → pre-norm blocks → `post_layernorm` →
//!   the attention-pooling head (a learned probe attends over the tokens, then a residual
//!   MLP) → the image embedding;
//! - text: CLIP's tower without the causal mask, pooled at the last position, then `head`;
//! - scores: cosine similarity times `exp(logit_scale)` plus `logit_bias`, each pair scored
//!   on its own by a sigmoid.

use super::config::SiglipConfig;
use crate::models::clip::config::ClipVisionConfig;
use crate::models::clip::model::{cosine_scores, TowerOutput};
use crate::models::clip::TextTower;
use crate::models::encoder_block::{self, check_images, EncoderBlock, CLIP_NAMES};
use crate::models::patch_embedding::{embed_patches, param, patch_conv, Resample};
use crate::nn::{AttentionMasks, Conv2d, Embedding, LayerNorm, Linear, Module, MultiheadAttention};
use crate::{DType, Error, Generator, Result, Tensor};

/// `vision_model.head`: multi-head attention pooling (MAP).
pub struct MapHead {
    /// [1, 1, D].
    probe: Tensor,
    attention: MultiheadAttention,
    layernorm: LayerNorm,
    fc1: Linear,
    fc2: Linear,
    act: crate::nn::Activation,
    training: bool,
}

impl MapHead {
    fn new(c: &ClipVisionConfig, gen: &mut Generator) -> Result<MapHead> {
        let t = &c.tower;
        let d = t.hidden_size;
        Ok(MapHead {
            probe: param(&[1, 1, d], gen)?,
            attention: MultiheadAttention::new(d, t.num_attention_heads, true, 0.0, true, gen)?,
            layernorm: LayerNorm::new(&[d], t.layer_norm_eps, true)?,
            fc1: Linear::new(d, t.intermediate_size, true, gen)?,
            fc2: Linear::new(t.intermediate_size, d, true, gen)?,
            act: t.hidden_act,
            training: true,
        })
    }
}

impl Module for MapHead {
    /// Tokens [B, T, D] → one row each [B, D].
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, d) = (x.shape()[0], x.shape()[2]);
        let probe = self.probe.expand(&[b, 1, d])?.to_dtype(x.dtype())?;
        let h = self
            .attention
            .attend(&probe, x, x, AttentionMasks::default())?;
        let m = self.fc2.forward(
            &self
                .act
                .apply(&self.fc1.forward(&self.layernorm.forward(&h)?)?)?,
        )?;
        h.add(&m)?.squeeze(1)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("probe".into(), self.probe.clone())]
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("attention".into(), &self.attention),
            ("layernorm".into(), &self.layernorm),
            ("mlp.fc1".into(), &self.fc1),
            ("mlp.fc2".into(), &self.fc2),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![
            &mut self.attention,
            &mut self.layernorm,
            &mut self.fc1,
            &mut self.fc2,
        ]
    }

    crate::nn::training_field!();
}

/// `vision_model.*`.
pub struct VisionTower {
    pub config: ClipVisionConfig,
    patch_embedding: Conv2d,
    /// [patches, D].
    position_embedding: Embedding,
    layers: Vec<EncoderBlock>,
    post_layernorm: LayerNorm,
    head: Option<MapHead>,
    training: bool,
}

impl VisionTower {
    fn new(config: ClipVisionConfig, head: bool, gen: &mut Generator) -> Result<VisionTower> {
        let d = config.tower.hidden_size;
        Ok(VisionTower {
            patch_embedding: patch_conv(config.num_channels, d, config.patch_size, true, gen)?,
            position_embedding: Embedding::new(config.grid() * config.grid(), d, gen)?,
            layers: encoder_block::blocks(
                config.tower.num_hidden_layers,
                &CLIP_NAMES,
                config.tower.block(false),
                None,
                gen,
            )?,
            post_layernorm: LayerNorm::new(&[d], config.tower.layer_norm_eps, true)?,
            head: head.then(|| MapHead::new(&config, gen)).transpose()?,
            config,
            training: true,
        })
    }

    /// Images [B, C, H, W] → every token after `post_layernorm`, and the head's pooled row
    /// (the mean of the tokens for a tower without a head).
    pub fn run(&self, images: &Tensor) -> Result<TowerOutput> {
        let c = &self.config;
        check_images("SigLIP vision", images, c.num_channels, c.patch_size)?;
        let table = self.position_embedding.weight.unsqueeze(0)?;
        let mut h = embed_patches(
            &self.patch_embedding,
            images,
            &[],
            &table,
            Resample::Bicubic,
        )?;
        let mut hidden_states = vec![h.clone()];
        for layer in &self.layers {
            h = layer.forward(&h)?;
            hidden_states.push(h.clone());
        }
        let h = self.post_layernorm.forward(&h)?;
        let pooled = match &self.head {
            Some(head) => head.forward(&h)?,
            None => h.mean_dims(&[1], false)?,
        };
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

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("embeddings.patch_embedding".into(), &self.patch_embedding),
            (
                "embeddings.position_embedding".into(),
                &self.position_embedding,
            ),
        ];
        for (i, layer) in self.layers.iter().enumerate() {
            c.push((format!("encoder.layers.{i}"), layer));
        }
        c.push(("post_layernorm".into(), &self.post_layernorm));
        if let Some(head) = &self.head {
            c.push(("head".into(), head));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> =
            vec![&mut self.patch_embedding, &mut self.position_embedding];
        for layer in &mut self.layers {
            c.push(layer);
        }
        c.push(&mut self.post_layernorm);
        if let Some(head) = &mut self.head {
            c.push(head);
        }
        c
    }

    crate::nn::training_field!();
}

/// `SiglipModel`.
pub struct Siglip {
    pub config: SiglipConfig,
    pub text: TextTower,
    pub vision: VisionTower,
    /// Scalars ([1] in checkpoints): the scores are `exp(logit_scale) · cos + logit_bias`.
    logit_scale: Tensor,
    logit_bias: Tensor,
    /// The checkpoint's image preprocessing, when loaded from a folder that has one.
    pub processor: Option<crate::vision::ImageProcessor>,
    /// Reads prompts for `embed_texts`; `None` for a folder without tokenizer files.
    pub tokenizer: Option<crate::models::prompt_tokenizer::PromptTokenizer>,
    training: bool,
}

impl Siglip {
    pub fn new(config: SiglipConfig, gen: &mut Generator) -> Result<Siglip> {
        if config.text.head != Some(config.vision.tower.hidden_size) {
            return Err(Error::format(
                "SigLIP",
                format!(
                    "the text head's width {:?} must equal the vision width {} for the two embeddings to meet",
                    config.text.head, config.vision.tower.hidden_size
                ),
            ));
        }
        let scalar = |v: f64| -> Result<Tensor> {
            Tensor::full(v, &[1], DType::F32, crate::Device::Cpu)?.requires_grad_()
        };
        Ok(Siglip {
            text: TextTower::new(config.text.clone(), gen)?,
            vision: VisionTower::new(config.vision.clone(), config.vision_head, gen)?,
            logit_scale: scalar((10f64).ln())?,
            logit_bias: scalar(-10.0)?,
            config,
            processor: None,
            tokenizer: None,
            training: true,
        })
    }

    /// Images → their embeddings [B, D] (the attention-pooled row, not normalised).
    pub fn image_features(&self, images: &Tensor) -> Result<Tensor> {
        Ok(self.vision.run(images)?.pooler_output)
    }

    /// Token ids [B, T] → their embeddings [B, D] (after the text head, not normalised).
    pub fn text_features(&self, ids: &Tensor) -> Result<Tensor> {
        Ok(self.text.run(ids)?.pooler_output)
    }

    /// `logits_per_image` [images, texts]; `sigmoid` of each is that pair's probability.
    pub fn scores(&self, image_features: &Tensor, text_features: &Tensor) -> Result<Tensor> {
        let cos = cosine_scores(image_features, text_features, &self.logit_scale)?;
        cos.add(&self.logit_bias.to_dtype(cos.dtype())?)
    }
}

impl Module for Siglip {
    /// Images → their embeddings.
    fn forward(&self, images: &Tensor) -> Result<Tensor> {
        self.image_features(images)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        vec![
            ("logit_scale".into(), self.logit_scale.clone()),
            ("logit_bias".into(), self.logit_bias.clone()),
        ]
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("text_model".into(), &self.text),
            ("vision_model".into(), &self.vision),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.text, &mut self.vision]
    }

    crate::nn::training_field!();

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn title(&self) -> String {
        let (t, v) = (&self.config.text, &self.config.vision);
        format!(
            "SigLIP(vision: patch {}, {} layers, width {}; text: {} layers, width {})",
            v.patch_size,
            v.tower.num_hidden_layers,
            v.tower.hidden_size,
            t.tower.num_hidden_layers,
            t.tower.hidden_size
        )
    }

    fn input_shape(&self) -> Option<Vec<usize>> {
        let v = &self.config.vision;
        Some(vec![1, v.num_channels, v.image_size, v.image_size])
    }
}
