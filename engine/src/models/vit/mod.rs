//! Vision Transformers from Hugging Face folders (config.json + model.safetensors, sharded, or
//! pytorch_model.bin), with transformers' names: `ViTModel`, `ViTForImageClassification`,
//! `DeiTModel`, `DeiTForImageClassification` and `DeiTForImageClassificationWithTeacher`.

pub mod config;
pub mod model;

pub use config::{Variant, ViTConfig};
pub use model::{HeadKind, ViT, ViTOutput};

use crate::io::pretrained::{load_weights, read_config};
use crate::nn::Module;
use crate::{Error, Generator, Result, Tensor};
use std::collections::BTreeMap;
use std::path::Path;

/// Which transformers class the weights are: a classifier keeps its backbone under `vit.` or
/// `deit.`.
fn head_of(weights: &BTreeMap<String, Tensor>) -> HeadKind {
    if weights.contains_key("distillation_classifier.weight") {
        HeadKind::Distilled
    } else if weights.contains_key("classifier.weight") {
        HeadKind::Classifier
    } else if weights.contains_key("pooler.dense.weight") {
        HeadKind::Pooler
    } else {
        HeadKind::None
    }
}

impl ViT {
    /// The model a `save_pretrained` folder holds. Every weight must be one the config
    /// describes, with its shape: a mismatch names every tensor that differs.
    pub fn from_pretrained(dir: &Path) -> Result<ViT> {
        ViT::from_folder(dir, &read_config(dir)?)
    }

    /// `from_pretrained` with the folder's `config.json` already read.
    pub fn from_folder(dir: &Path, json: &serde_json::Value) -> Result<ViT> {
        let config = ViTConfig::from_json(json)
            .map_err(|e| Error::format("ViT", format!("{}: {e}", dir.display())))?;
        let weights = load_weights(dir)?;
        let mut model = ViT::new(config, head_of(&weights), &mut Generator::new(0))?;
        model.processor = crate::vision::ImageProcessor::from_folder(dir)?;
        model
            .load_state_dict(&weights, true)
            .map_err(|e| Error::format("ViT", format!("{}: {e}", dir.display())))?;
        Ok(model)
    }
}

impl ViT {
    /// Writes a folder transformers' `from_pretrained` reads: config.json (with the classes as
    /// id2label), model.safetensors with transformers' names, and preprocessor_config.json
    /// when the model has a processor. LoRA adapters must be merged first (their tensors have
    /// no place in the class's weights).
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        let state = self.state_dict();
        if let Some(name) = state.keys().find(|n| n.contains(".lora_")) {
            return Err(Error::invalid(
                "save_pretrained",
                format!("the model has LoRA adapters ({name}): merge_lora() them first"),
            ));
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let write_json = |name: &str, v: &serde_json::Value| {
            let path = dir.join(name);
            let text = serde_json::to_string_pretty(v).expect("JSON values serialize");
            std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))
        };
        write_json("config.json", &self.config.to_json(self.architecture()))?;
        if let Some(p) = &self.processor {
            write_json("preprocessor_config.json", &p.to_json())?;
        }
        let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
        crate::io::safetensors::save(dir.join("model.safetensors"), &state, Some(meta))
    }
}

#[cfg(test)]
mod tests;
