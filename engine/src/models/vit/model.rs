//! The Vision Transformer as transformers' ViT and DeiT classes compute it, with their
//! parameter names:
//!
//! patches (a strided conv) → [CLS] (+ DeiT's distillation token) + patches + position table →
//! pre-norm encoder blocks → final LayerNorm → a head on the first rows: a pooler (dense + tanh,
//! `ViTModel`, `DeiTModel`), a classifier on [CLS] (`*ForImageClassification`), or DeiT's two
//! classifiers on [CLS] and the distillation token, averaged
//! (`DeiTForImageClassificationWithTeacher`).

use super::config::{Variant, ViTConfig};
use crate::models::encoder_block::{self, check_images, EncoderBlock, VIT_NAMES};
use crate::models::patch_embedding::{embed_patches, param, patch_conv, Resample};
use crate::nn::{Conv2d, LayerNorm, Linear, Module};
use crate::{Error, Generator, Result, Tensor};

/// Patch projection, class (and distillation) token and position table (`embeddings.*`).
pub struct Embeddings {
    pub cls_token: Tensor,
    /// DeiT's second token.
    pub distillation_token: Option<Tensor>,
    pub position_embeddings: Tensor,
    projection: Conv2d,
    training: bool,
}

impl Embeddings {
    fn new(c: &ViTConfig, gen: &mut Generator) -> Result<Embeddings> {
        let d = c.hidden_size;
        let positions = c.grid() * c.grid() + c.extra_tokens();
        Ok(Embeddings {
            cls_token: param(&[1, 1, d], gen)?,
            distillation_token: match c.variant {
                Variant::DeiT => Some(param(&[1, 1, d], gen)?),
                Variant::ViT => None,
            },
            position_embeddings: param(&[1, positions, d], gen)?,
            projection: patch_conv(c.num_channels, d, c.patch_size, true, gen)?,
            training: true,
        })
    }

    fn forward(&self, images: &Tensor) -> Result<Tensor> {
        let mut leading = vec![&self.cls_token];
        leading.extend(&self.distillation_token);
        let table = &self.position_embeddings;
        embed_patches(&self.projection, images, &leading, table, Resample::Bicubic)
    }
}

impl Module for Embeddings {
    fn forward(&self, images: &Tensor) -> Result<Tensor> {
        Embeddings::forward(self, images)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        let mut p = vec![("cls_token".into(), self.cls_token.clone())];
        if let Some(t) = &self.distillation_token {
            p.push(("distillation_token".into(), t.clone()));
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

/// What sits on the first rows after the encoder.
pub enum Head {
    /// The pooler: dense + tanh on [CLS] (`pooler.dense`).
    Pooler(Linear),
    /// A classifier on [CLS] (`classifier`).
    Classifier(Linear),
    /// DeiT's classifiers on [CLS] and on the distillation token (`cls_classifier`,
    /// `distillation_classifier`), averaged.
    Distilled(Linear, Linear),
    /// The backbone alone.
    None,
}

/// Which head to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadKind {
    Pooler,
    Classifier,
    Distilled,
    None,
}

/// `ViTModel` / `DeiTModel` (names at the root) or a classifier (the backbone under `vit.` or
/// `deit.`).
pub struct ViT {
    pub config: ViTConfig,
    embeddings: Embeddings,
    layers: Vec<EncoderBlock>,
    layernorm: LayerNorm,
    head: Head,
    /// The checkpoint's preprocessing, when loaded from a folder that has one.
    pub processor: Option<crate::vision::ImageProcessor>,
    training: bool,
}

/// What a forward gives: every token after the final norm, and the head's output.
pub struct ViTOutput {
    /// [B, extra + patches, D].
    pub last_hidden_state: Tensor,
    /// The pooler's [B, D] or the classifier's logits [B, labels]; `None` without a head.
    pub head: Option<Tensor>,
}

impl ViT {
    pub fn new(config: ViTConfig, head: HeadKind, gen: &mut Generator) -> Result<ViT> {
        let embeddings = Embeddings::new(&config, gen)?;
        let layers = encoder_block::blocks(
            config.num_hidden_layers,
            &VIT_NAMES,
            config.block(),
            None,
            gen,
        )?;
        let d = config.hidden_size;
        let classes = config.labels.len();
        let classifier = |gen: &mut Generator| -> Result<Linear> {
            if classes == 0 {
                return Err(Error::invalid(
                    "ViT classifier",
                    "the config names no labels (id2label or num_labels)",
                ));
            }
            Linear::new(d, classes, true, gen)
        };
        let head = match head {
            HeadKind::Pooler => Head::Pooler(Linear::new(d, config.pooler_output_size, true, gen)?),
            HeadKind::Classifier => Head::Classifier(classifier(gen)?),
            HeadKind::Distilled => {
                if config.variant != Variant::DeiT {
                    return Err(Error::invalid(
                        "ViT",
                        "a distilled head needs DeiT's distillation token",
                    ));
                }
                Head::Distilled(classifier(gen)?, classifier(gen)?)
            }
            HeadKind::None => Head::None,
        };
        Ok(ViT {
            layernorm: LayerNorm::new(&[d], config.layer_norm_eps, true)?,
            config,
            embeddings,
            layers,
            head,
            processor: None,
            training: true,
        })
    }

    /// Images [B, C, H, W] (H and W multiples of the patch size).
    pub fn run(&self, images: &Tensor) -> Result<ViTOutput> {
        let c = &self.config;
        check_images("ViT", images, c.num_channels, c.patch_size)?;
        let mut h = self.embeddings.forward(images)?;
        for layer in &self.layers {
            h = layer.forward(&h)?;
        }
        let h = self.layernorm.forward(&h)?;
        let row = |i: usize| h.narrow(1, i, 1)?.squeeze(1);
        let head = match &self.head {
            Head::Pooler(dense) => Some(dense.forward(&row(0)?)?.tanh()?),
            Head::Classifier(linear) => Some(linear.forward(&row(0)?)?),
            Head::Distilled(cls, dist) => {
                let sum = cls.forward(&row(0)?)?.add(&dist.forward(&row(1)?)?)?;
                Some(sum.mul_scalar(0.5)?)
            }
            Head::None => None,
        };
        Ok(ViTOutput {
            last_hidden_state: h,
            head,
        })
    }

    /// Whether the head is `ViTModel`'s pooler.
    pub fn has_pooler(&self) -> bool {
        matches!(self.head, Head::Pooler(_))
    }

    /// A fresh classifier on [CLS] for `labels` (transformers' `*ForImageClassification`),
    /// in place of the pooler, the old classifier or DeiT's two, on the model's device: what
    /// fine-tuning on another set of classes starts from.
    pub fn set_classes(&mut self, labels: Vec<String>, gen: &mut Generator) -> Result<()> {
        if labels.is_empty() {
            return Err(Error::invalid("set_classes", "needs at least one class"));
        }
        let device = crate::models::pretrained::device_of(self);
        let linear = Linear::new(self.config.hidden_size, labels.len(), true, gen)?;
        linear.to_device(device)?;
        self.head = Head::Classifier(linear);
        self.config.labels = labels;
        Ok(())
    }

    /// transformers' class for this head.
    pub fn architecture(&self) -> &'static str {
        match (&self.head, self.config.variant) {
            (Head::Pooler(_) | Head::None, Variant::ViT) => "ViTModel",
            (Head::Pooler(_) | Head::None, Variant::DeiT) => "DeiTModel",
            (Head::Classifier(_), Variant::ViT) => "ViTForImageClassification",
            (Head::Classifier(_), Variant::DeiT) => "DeiTForImageClassification",
            (Head::Distilled(..), _) => "DeiTForImageClassificationWithTeacher",
        }
    }

    fn backbone_prefix(&self) -> &'static str {
        match (&self.head, self.config.variant) {
            (Head::Pooler(_) | Head::None, _) => "",
            (_, Variant::ViT) => "vit.",
            (_, Variant::DeiT) => "deit.",
        }
    }
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
            Head::Distilled(cls, dist) => {
                c.push(("cls_classifier".into(), cls));
                c.push(("distillation_classifier".into(), dist));
            }
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
            Head::Distilled(cls, dist) => {
                c.push(cls);
                c.push(dist);
            }
            Head::None => {}
        }
        c
    }

    crate::nn::training_field!();

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn title(&self) -> String {
        let c = &self.config;
        let family = match c.variant {
            Variant::ViT => "ViT",
            Variant::DeiT => "DeiT",
        };
        format!(
            "{family}(patch {}, {} layers, width {}, {} heads{})",
            c.patch_size,
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            match self.head {
                Head::Classifier(_) | Head::Distilled(..) =>
                    format!(", {} classes", c.labels.len()),
                _ => String::new(),
            }
        )
    }

    fn input_shape(&self) -> Option<Vec<usize>> {
        let c = &self.config;
        Some(vec![1, c.num_channels, c.image_size, c.image_size])
    }
}
