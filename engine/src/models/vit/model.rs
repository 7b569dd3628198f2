//! The Vision Transformer as transformers' `ViTModel` and `ViTForImageClassification` compute
//! it, with their parameter names:
//!
//! patches (a strided conv) → [CLS] + patches + position table → pre-norm encoder layers
//! (x + attention(LN(x)), then x + MLP(LN(x))) → final LayerNorm → the [CLS] row to a pooler
//! (dense + tanh, `ViTModel`) or a classifier (`ViTForImageClassification`).

use super::config::ViTConfig;
use crate::nn::{Conv2d, LayerNorm, Linear, Module};
use crate::ops::attention::AttentionOptions;
use crate::{Conv2dOptions, Error, Generator, Result, Tensor};

/// Patch projection, class token and position table (`embeddings.*`).
pub struct Embeddings {
    pub cls_token: Tensor,
    pub position_embeddings: Tensor,
    projection: Conv2d,
    training: bool,
}

impl Embeddings {
    fn new(c: &ViTConfig, gen: &mut Generator) -> Result<Embeddings> {
        let p = c.patch_size;
        let options = Conv2dOptions {
            stride: (p, p),
            padding: (0, 0),
            dilation: (1, 1),
            groups: 1,
        };
        let d = c.hidden_size;
        let positions = c.grid() * c.grid() + 1;
        Ok(Embeddings {
            cls_token: param(&[1, 1, d], gen)?,
            position_embeddings: param(&[1, positions, d], gen)?,
            projection: Conv2d::new(c.num_channels, d, (p, p), options, true, gen)?,
            training: true,
        })
    }

    /// The position table for an image of `h` x `w` patches: the checkpoint's own when the grid
    /// matches, else its patch rows resampled bicubically (transformers'
    /// `interpolate_pos_encoding`), the class row unchanged.
    fn positions(&self, h: usize, w: usize) -> Result<Tensor> {
        let table = &self.position_embeddings;
        let (n, d) = (table.shape()[1] - 1, table.shape()[2]);
        if n == h * w && h == w {
            return Ok(table.clone());
        }
        let side = (n as f64).sqrt() as usize;
        if side * side != n {
            return Err(Error::invalid(
                "ViT",
                format!("a position table of {n} patches is not a square grid to resample"),
            ));
        }
        let grid = table
            .narrow(1, 1, n)?
            .reshape(&[1, side as isize, side as isize, d as isize])?
            .permute(&[0, 3, 1, 2])?
            .interpolate_bicubic((h, w), false)?
            .permute(&[0, 2, 3, 1])?
            .reshape(&[1, (h * w) as isize, d as isize])?;
        Tensor::cat(&[table.narrow(1, 0, 1)?, grid], 1)
    }

    fn forward(&self, images: &Tensor) -> Result<Tensor> {
        let patches = self.projection.forward(images)?; // [B, D, h, w]
        let [b, d, h, w] = patches.shape()[..] else {
            unreachable!("a conv gives rank 4")
        };
        let tokens = patches
            .reshape(&[b as isize, d as isize, (h * w) as isize])?
            .transpose(1, 2)?;
        let cls = self
            .cls_token
            .expand(&[b, 1, d])?
            .to_dtype(tokens.dtype())?;
        let x = Tensor::cat(&[cls, tokens], 1)?;
        x.add(&self.positions(h, w)?.to_dtype(x.dtype())?)
    }
}

impl Module for Embeddings {
    fn forward(&self, images: &Tensor) -> Result<Tensor> {
        Embeddings::forward(self, images)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        vec![
            ("cls_token".into(), self.cls_token.clone()),
            (
                "position_embeddings".into(),
                self.position_embeddings.clone(),
            ),
        ]
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("patch_embeddings.projection".into(), &self.projection)]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.projection]
    }

    crate::nn::training_field!();
}

/// A parameter drawn from N(0, 0.02²), transformers' `initializer_range`.
fn param(shape: &[usize], gen: &mut Generator) -> Result<Tensor> {
    let t = Tensor::randn(shape, crate::DType::F32, Some(gen))?.mul_scalar(0.02)?;
    t.requires_grad_()
}

/// Self-attention with separate query, key and value projections (`attention.attention.*`)
/// and the output projection (`attention.output.dense`).
pub struct Attention {
    query: Linear,
    key: Linear,
    value: Linear,
    output: Linear,
    heads: usize,
    training: bool,
}

impl Module for Attention {
    /// x [B, T, D] → [B, T, D].
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let [b, t, d] = x.shape()[..] else {
            return Err(Error::invalid(
                "ViT attention",
                format!("expects [B, T, D], got {:?}", x.shape()),
            ));
        };
        let split = |l: &Linear| -> Result<Tensor> {
            l.forward(x)?
                .reshape(&[b as isize, t as isize, self.heads as isize, -1])?
                .transpose(1, 2)
        };
        let (q, k, v) = (split(&self.query)?, split(&self.key)?, split(&self.value)?);
        let y = q.scaled_dot_product_attention(&k, &v, AttentionOptions::default())?;
        self.output.forward(
            &y.transpose(1, 2)?
                .reshape(&[b as isize, t as isize, d as isize])?,
        )
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("attention.query".into(), &self.query),
            ("attention.key".into(), &self.key),
            ("attention.value".into(), &self.value),
            ("output.dense".into(), &self.output),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![
            &mut self.query,
            &mut self.key,
            &mut self.value,
            &mut self.output,
        ]
    }

    crate::nn::training_field!();
}

/// One pre-norm encoder layer (`encoder.layer.{i}.*`).
pub struct Layer {
    layernorm_before: LayerNorm,
    attention: Attention,
    layernorm_after: LayerNorm,
    intermediate: Linear,
    output: Linear,
    act: crate::nn::Activation,
    training: bool,
}

impl Layer {
    fn new(c: &ViTConfig, gen: &mut Generator) -> Result<Layer> {
        let (d, eps) = (c.hidden_size, c.layer_norm_eps);
        let linear =
            |i: usize, o: usize, bias: bool, gen: &mut Generator| Linear::new(i, o, bias, gen);
        Ok(Layer {
            layernorm_before: LayerNorm::new(&[d], eps, true)?,
            attention: Attention {
                query: linear(d, d, c.qkv_bias, gen)?,
                key: linear(d, d, c.qkv_bias, gen)?,
                value: linear(d, d, c.qkv_bias, gen)?,
                output: linear(d, d, true, gen)?,
                heads: c.num_attention_heads,
                training: true,
            },
            layernorm_after: LayerNorm::new(&[d], eps, true)?,
            intermediate: linear(d, c.intermediate_size, true, gen)?,
            output: linear(c.intermediate_size, d, true, gen)?,
            act: c.hidden_act,
            training: true,
        })
    }
}

impl Module for Layer {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.add(&self.attention.forward(&self.layernorm_before.forward(x)?)?)?;
        let h = self
            .intermediate
            .forward(&self.layernorm_after.forward(&x)?)?;
        x.add(&self.output.forward(&self.act.apply(&h)?)?)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("layernorm_before".into(), &self.layernorm_before),
            ("attention".into(), &self.attention),
            ("layernorm_after".into(), &self.layernorm_after),
            ("intermediate.dense".into(), &self.intermediate),
            ("output.dense".into(), &self.output),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![
            &mut self.layernorm_before,
            &mut self.attention,
            &mut self.layernorm_after,
            &mut self.intermediate,
            &mut self.output,
        ]
    }

    crate::nn::training_field!();
}

/// What sits on the [CLS] row after the encoder.
pub enum Head {
    /// `ViTModel`'s pooler: dense + tanh (`pooler.dense`).
    Pooler(Linear),
    /// `ViTForImageClassification`'s classifier (`classifier`).
    Classifier(Linear),
    /// `ViTModel(add_pooling_layer=False)`.
    None,
}

/// `ViTModel` (names at the root) or `ViTForImageClassification` (the backbone under `vit.`).
pub struct ViT {
    pub config: ViTConfig,
    embeddings: Embeddings,
    layers: Vec<Layer>,
    layernorm: LayerNorm,
    head: Head,
    training: bool,
}

/// What a forward gives: every token after the final norm, and the head's output on [CLS].
pub struct ViTOutput {
    /// [B, 1 + patches, D].
    pub last_hidden_state: Tensor,
    /// The pooler's [B, D] or the classifier's logits [B, labels]; `None` without a head.
    pub head: Option<Tensor>,
}

impl ViT {
    pub fn new(config: ViTConfig, head: HeadKind, gen: &mut Generator) -> Result<ViT> {
        let embeddings = Embeddings::new(&config, gen)?;
        let layers = (0..config.num_hidden_layers)
            .map(|_| Layer::new(&config, gen))
            .collect::<Result<_>>()?;
        let d = config.hidden_size;
        let head = match head {
            HeadKind::Pooler => Head::Pooler(Linear::new(d, config.pooler_output_size, true, gen)?),
            HeadKind::Classifier => {
                if config.labels.is_empty() {
                    return Err(Error::invalid(
                        "ViTForImageClassification",
                        "the config names no labels (id2label or num_labels)",
                    ));
                }
                Head::Classifier(Linear::new(d, config.labels.len(), true, gen)?)
            }
            HeadKind::None => Head::None,
        };
        Ok(ViT {
            layernorm: LayerNorm::new(&[d], config.layer_norm_eps, true)?,
            config,
            embeddings,
            layers,
            head,
            training: true,
        })
    }

    /// Images [B, C, H, W] (H and W multiples of the patch size).
    pub fn run(&self, images: &Tensor) -> Result<ViTOutput> {
        let c = &self.config;
        let ok = images.rank() == 4
            && images.shape()[1] == c.num_channels
            && images.shape()[2].is_multiple_of(c.patch_size)
            && images.shape()[3].is_multiple_of(c.patch_size)
            && images.shape()[2] > 0
            && images.shape()[3] > 0;
        if !ok {
            return Err(Error::invalid(
                "ViT",
                format!(
                    "expects images [B, {}, H, W] with H and W multiples of {}, got {:?}",
                    c.num_channels,
                    c.patch_size,
                    images.shape()
                ),
            ));
        }
        let mut h = self.embeddings.forward(images)?;
        for layer in &self.layers {
            h = layer.forward(&h)?;
        }
        let h = self.layernorm.forward(&h)?;
        let cls = || h.narrow(1, 0, 1)?.squeeze(1);
        let head = match &self.head {
            Head::Pooler(dense) => Some(dense.forward(&cls()?)?.tanh()?),
            Head::Classifier(linear) => Some(linear.forward(&cls()?)?),
            Head::None => None,
        };
        Ok(ViTOutput {
            last_hidden_state: h,
            head,
        })
    }

    fn backbone_prefix(&self) -> &'static str {
        match self.head {
            Head::Classifier(_) => "vit.",
            _ => "",
        }
    }
}

/// Which head to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadKind {
    Pooler,
    Classifier,
    None,
}

impl Module for ViT {
    /// The classifier's logits, the pooler's output, or (without a head) every token.
    fn forward(&self, images: &Tensor) -> Result<Tensor> {
        let out = self.run(images)?;
        Ok(out.head.unwrap_or(out.last_hidden_state))
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let p = self.backbone_prefix();
        let mut c: Vec<(String, &dyn Module)> = vec![(format!("{p}embeddings"), &self.embeddings)];
        for (i, layer) in self.layers.iter().enumerate() {
            c.push((format!("{p}encoder.layer.{i}"), layer));
        }
        c.push((format!("{p}layernorm"), &self.layernorm));
        match &self.head {
            Head::Pooler(l) => c.push(("pooler.dense".into(), l)),
            Head::Classifier(l) => c.push(("classifier".into(), l)),
            Head::None => {}
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.embeddings];
        for layer in &mut self.layers {
            c.push(layer);
        }
        c.push(&mut self.layernorm);
        match &mut self.head {
            Head::Pooler(l) | Head::Classifier(l) => c.push(l),
            Head::None => {}
        }
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        let c = &self.config;
        format!(
            "ViT(patch {}, {} layers, width {}, {} heads{})",
            c.patch_size,
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            match self.head {
                Head::Classifier(_) => format!(", {} classes", c.labels.len()),
                _ => String::new(),
            }
        )
    }

    fn input_shape(&self) -> Option<Vec<usize>> {
        let c = &self.config;
        Some(vec![1, c.num_channels, c.image_size, c.image_size])
    }
}
