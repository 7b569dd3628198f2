//! The image families as one kind of model: a Hugging Face folder's model by its
//! `config.json`'s `model_type` (`vision::load` in scripts), and what every image model answers
//! beyond `forward` — its class names, its image embedding, its checkpoint's preprocessing — so
//! classification and embedding work the same on each family.

use super::clip::Clip;
use super::dinov2::Dinov2;
use super::resnet::ResNet;
use super::siglip::Siglip;
use super::vit::ViT;
use crate::io::pretrained::read_config;
use crate::nn::Module;
use crate::vision::{ImageProcessor, RgbImage};
use crate::{no_grad, Device, Error, Result, Tensor};
use std::path::Path;

/// The `model_type`s `load_image_model` reads.
pub const IMAGE_MODEL_TYPES: &[&str] = &[
    "vit",
    "deit",
    "dinov2",
    "dinov2_with_registers",
    "clip",
    "siglip",
];

/// The image model a `save_pretrained` folder holds (with its `preprocessor_config.json`).
pub fn load_image_model(dir: &Path) -> Result<Box<dyn Module>> {
    let config = read_config(dir)?;
    let kind = config
        .get("model_type")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    Ok(match kind {
        "vit" | "deit" => Box::new(ViT::from_folder(dir, &config)?),
        "dinov2" | "dinov2_with_registers" => Box::new(Dinov2::from_folder(dir, &config)?),
        "clip" => Box::new(Clip::from_folder(dir, &config)?),
        "siglip" => Box::new(Siglip::from_folder(dir, &config)?),
        other => {
            return Err(Error::format(
                "load",
                format!(
                    "{}: model_type `{other}` is not an image model this reads (it reads {})",
                    dir.display(),
                    IMAGE_MODEL_TYPES.join(", ")
                ),
            ))
        }
    })
}

/// One class of a classification: its index, name and probability.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassScore {
    pub index: usize,
    pub label: String,
    pub score: f64,
}

/// What the image families share beyond `forward`.
pub trait ImageModel: Module {
    /// Class names by index (empty for a backbone, or a classifier without names).
    fn labels(&self) -> &[String] {
        &[]
    }

    /// Images [N, C, H, W] → one embedding each [N, D]: the pooled output (CLIP's projected
    /// image features).
    fn embed_images(&self, images: &Tensor) -> Result<Tensor>;

    /// The checkpoint's preprocessing (`preprocessor_config.json`), if the folder had one.
    fn processor(&self) -> Option<&ImageProcessor> {
        None
    }

    /// Photos as the model's input [N, C, H, W] on its device, by its checkpoint's processor.
    fn preprocess(&self, images: &[RgbImage]) -> Result<Tensor> {
        let p = self.processor().ok_or_else(|| {
            Error::invalid(
                "preprocess",
                format!(
                    "{} has no preprocessor_config.json: give it normalised [N, C, H, W] tensors",
                    self.title()
                ),
            )
        })?;
        p.batch(images)?.to_device(device_of(self))
    }

    /// The `topk` most probable classes of each image (softmax over the logits), best first.
    fn classify(&self, images: &Tensor, topk: usize) -> Result<Vec<Vec<ClassScore>>> {
        let logits = no_grad(|| self.forward(&images.to_device(device_of(self))?))?;
        if logits.rank() != 2 {
            return Err(Error::invalid(
                "classify",
                format!(
                    "{} gives {:?}, not class logits [N, classes]: it has no classifier head",
                    self.title(),
                    logits.shape()
                ),
            ));
        }
        let probs = logits.to_dtype(crate::DType::F32)?.softmax(-1)?;
        top_classes(&probs, self.labels(), topk)
    }
}

/// The device of a module's parameters (the CPU for one without any).
pub fn device_of<M: Module + ?Sized>(m: &M) -> Device {
    m.named_parameters()
        .first()
        .map(|(_, t)| t.device())
        .unwrap_or(Device::Cpu)
}

/// Rows of probabilities [N, classes] → each row's `topk` classes, best first; labels name
/// them where given (else `LABEL_i`, transformers' default).
pub fn top_classes(probs: &Tensor, labels: &[String], topk: usize) -> Result<Vec<Vec<ClassScore>>> {
    let classes = probs.shape()[1];
    let values = probs.to_vec_f64()?;
    Ok(values
        .chunks(classes.max(1))
        .map(|row| {
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            order
                .into_iter()
                .take(topk)
                .map(|i| ClassScore {
                    index: i,
                    label: labels
                        .get(i)
                        .cloned()
                        .unwrap_or_else(|| format!("LABEL_{i}")),
                    score: row[i],
                })
                .collect()
        })
        .collect())
}

/// `m` as an image model, when it is one of the image families.
pub fn as_image_model(m: &dyn Module) -> Option<&dyn ImageModel> {
    let any = m.as_any()?;
    if let Some(v) = any.downcast_ref::<ViT>() {
        return Some(v);
    }
    if let Some(d) = any.downcast_ref::<Dinov2>() {
        return Some(d);
    }
    if let Some(c) = any.downcast_ref::<Clip>() {
        return Some(c);
    }
    if let Some(s) = any.downcast_ref::<Siglip>() {
        return Some(s);
    }
    any.downcast_ref::<ResNet>().map(|r| r as &dyn ImageModel)
}

impl ImageModel for ViT {
    fn labels(&self) -> &[String] {
        &self.config.labels
    }

    /// The pooler's output where the model has one, else the [CLS] row after the final norm.
    fn embed_images(&self, images: &Tensor) -> Result<Tensor> {
        let out = self.run(images)?;
        match (self.has_pooler(), out.head) {
            (true, Some(pooled)) => Ok(pooled),
            _ => out.last_hidden_state.narrow(1, 0, 1)?.squeeze(1),
        }
    }

    fn processor(&self) -> Option<&ImageProcessor> {
        self.processor.as_ref()
    }
}

impl ImageModel for Dinov2 {
    fn labels(&self) -> &[String] {
        &self.config.labels
    }

    fn embed_images(&self, images: &Tensor) -> Result<Tensor> {
        Ok(self.run(images)?.pooler_output)
    }

    fn processor(&self) -> Option<&ImageProcessor> {
        self.processor.as_ref()
    }
}

impl ImageModel for Clip {
    fn embed_images(&self, images: &Tensor) -> Result<Tensor> {
        self.image_features(images)
    }

    fn processor(&self) -> Option<&ImageProcessor> {
        self.processor.as_ref()
    }
}

impl ImageModel for Siglip {
    fn embed_images(&self, images: &Tensor) -> Result<Tensor> {
        self.image_features(images)
    }

    fn processor(&self) -> Option<&ImageProcessor> {
        self.processor.as_ref()
    }
}

impl ImageModel for ResNet {
    /// The pooled features before the classifier.
    fn embed_images(&self, images: &Tensor) -> Result<Tensor> {
        self.features(images)
    }
}
