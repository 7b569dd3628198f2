//! DINOv2 as transformers' `Dinov2Model`, `Dinov2WithRegistersModel` and their
//! `*ForImageClassification` compute it, with their parameter names:
//!
//! patches → [CLS] + patches + position table (always resampled to the image's grid) → the
//! register tokens after [CLS] → pre-norm blocks with LayerScale → final LayerNorm. The pooled
//! output is the [CLS] row; the classifier reads [CLS] beside the mean of the patch tokens.

use super::config::Dinov2Config;
use crate::models::encoder_block::{self, check_images, EncoderBlock, DINOV2_NAMES};
use crate::models::patch_embedding::{embed_patches, param, patch_conv, Resample};
use crate::nn::{Conv2d, LayerNorm, Linear, Module};
use crate::{Error, Generator, Result, Tensor};

/// `embeddings.*`.
pub struct Embeddings {
    cls_token: Tensor,
    /// Read by masked-image pretraining only; kept so checkpoints load and save whole.
    mask_token: Option<Tensor>,
    register_tokens: Option<Tensor>,
    position_embeddings: Tensor,
    projection: Conv2d,
    /// The registers variant resamples its table with antialiasing, as transformers does.
    antialias: bool,
    training: bool,
}

impl Embeddings {
    fn new(c: &Dinov2Config, gen: &mut Generator) -> Result<Embeddings> {
        let d = c.hidden_size;
        Ok(Embeddings {
            cls_token: param(&[1, 1, d], gen)?,
            mask_token: c.mask_token.then(|| param(&[1, d], gen)).transpose()?,
            register_tokens: (c.registers > 0)
                .then(|| param(&[1, c.registers, d], gen))
                .transpose()?,
            position_embeddings: param(&[1, c.grid() * c.grid() + 1, d], gen)?,
            projection: patch_conv(c.num_channels, d, c.patch_size, true, gen)?,
            antialias: c.registers > 0,
            training: true,
        })
    }
}

impl Module for Embeddings {
    fn forward(&self, images: &Tensor) -> Result<Tensor> {
        let resample = match self.antialias {
            true => Resample::BicubicAntialias,
            false => Resample::Bicubic,
        };
        let (cls, table) = (&self.cls_token, &self.position_embeddings);
        let x = embed_patches(&self.projection, images, &[cls], table, resample)?;
        let (b, d) = (x.shape()[0], x.shape()[2]);
        match &self.register_tokens {
            Some(r) => {
                let r = r.expand(&[b, r.shape()[1], d])?.to_dtype(x.dtype())?;
                let n = x.shape()[1];
                Tensor::cat(&[x.narrow(1, 0, 1)?, r, x.narrow(1, 1, n - 1)?], 1)
            }
            None => Ok(x),
        }
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        let mut p = vec![("cls_token".to_string(), self.cls_token.clone())];
        if let Some(t) = &self.mask_token {
            p.push(("mask_token".into(), t.clone()));
        }
        if let Some(t) = &self.register_tokens {
            p.push(("register_tokens".into(), t.clone()));
        }
        p.push((
            "position_embeddings".into(),
            self.position_embeddings.clone(),
        ));
        p
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("patch_embeddings.projection".into(), &self.projection)]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.projection]
    }

    crate::nn::training_field!();
}

/// `Dinov2Model` (names at the root) or `Dinov2ForImageClassification` (under `dinov2.`).
pub struct Dinov2 {
    pub config: Dinov2Config,
    embeddings: Embeddings,
    layers: Vec<EncoderBlock>,
    layernorm: LayerNorm,
    /// On [CLS] beside the patch-token mean: [labels, 2 · hidden].
    classifier: Option<Linear>,
    /// The checkpoint's preprocessing, when loaded from a folder that has one.
    pub processor: Option<crate::vision::ImageProcessor>,
    training: bool,
}

/// What a forward gives.
pub struct Dinov2Output {
    /// [B, 1 + registers + patches, D], after the final norm.
    pub last_hidden_state: Tensor,
    /// The [CLS] row [B, D].
    pub pooler_output: Tensor,
    /// The classifier's [B, labels], where the model has one.
    pub logits: Option<Tensor>,
}

impl Dinov2 {
    pub fn new(config: Dinov2Config, classifier: bool, gen: &mut Generator) -> Result<Dinov2> {
        let d = config.hidden_size;
        let classifier = match classifier {
            false => None,
            true if config.labels.is_empty() => {
                return Err(Error::invalid(
                    "Dinov2ForImageClassification",
                    "the config names no labels (id2label or num_labels)",
                ))
            }
            true => Some(Linear::new(2 * d, config.labels.len(), true, gen)?),
        };
        Ok(Dinov2 {
            embeddings: Embeddings::new(&config, gen)?,
            layers: encoder_block::blocks(
                config.num_hidden_layers,
                &DINOV2_NAMES,
                config.block(),
                Some(config.layerscale_value),
                gen,
            )?,
            layernorm: LayerNorm::new(&[d], config.layer_norm_eps, true)?,
            classifier,
            config,
            processor: None,
            training: true,
        })
    }

    /// Images [B, C, H, W] (H and W multiples of the patch size).
    pub fn run(&self, images: &Tensor) -> Result<Dinov2Output> {
        let c = &self.config;
        check_images("DINOv2", images, c.num_channels, c.patch_size)?;
        let mut h = self.embeddings.forward(images)?;
        for layer in &self.layers {
            h = layer.forward(&h)?;
        }
        let h = self.layernorm.forward(&h)?;
        let cls = h.narrow(1, 0, 1)?.squeeze(1)?;
        let logits = match &self.classifier {
            Some(linear) => {
                let first = 1 + c.registers;
                let patches = h.narrow(1, first, h.shape()[1] - first)?;
                let joined = Tensor::cat(&[cls.clone(), patches.mean_dims(&[1], false)?], 1)?;
                Some(linear.forward(&joined)?)
            }
            None => None,
        };
        Ok(Dinov2Output {
            last_hidden_state: h,
            pooler_output: cls,
            logits,
        })
    }
}

impl Module for Dinov2 {
    /// The classifier's logits, or the pooled [CLS] row.
    fn forward(&self, images: &Tensor) -> Result<Tensor> {
        let out = self.run(images)?;
        Ok(out.logits.unwrap_or(out.pooler_output))
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let p = if self.classifier.is_some() {
            "dinov2."
        } else {
            ""
        };
        let mut c: Vec<(String, &dyn Module)> = vec![(format!("{p}embeddings"), &self.embeddings)];
        for (i, layer) in self.layers.iter().enumerate() {
            c.push((format!("{p}encoder.layer.{i}"), layer));
        }
        c.push((format!("{p}layernorm"), &self.layernorm));
        if let Some(l) = &self.classifier {
            c.push(("classifier".into(), l));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.embeddings];
        for layer in &mut self.layers {
            c.push(layer);
        }
        c.push(&mut self.layernorm);
        if let Some(l) = &mut self.classifier {
            c.push(l);
        }
        c
    }

    crate::nn::training_field!();

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn title(&self) -> String {
        let c = &self.config;
        format!(
            "DINOv2(patch {}, {} layers, width {}, {} heads{}{})",
            c.patch_size,
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            match c.registers {
                0 => String::new(),
                r => format!(", {r} registers"),
            },
            match self.classifier {
                Some(_) => format!(", {} classes", c.labels.len()),
                None => String::new(),
            }
        )
    }

    fn input_shape(&self) -> Option<Vec<usize>> {
        let c = &self.config;
        Some(vec![1, c.num_channels, c.image_size, c.image_size])
    }
}
