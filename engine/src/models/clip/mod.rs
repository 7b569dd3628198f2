//! CLIP from Hugging Face folders (`CLIPModel`: config.json + model.safetensors, sharded, or
//! pytorch_model.bin, the tokenizer files and preprocessor_config.json), with transformers' names, and what people use
//! it for: image and text embeddings, and zero-shot classification.

pub mod config;
pub mod model;
pub mod text_model;
pub mod tokenizer;

pub use config::ClipConfig;
pub use model::{Clip, TextTower, TowerOutput, VisionTower};
pub use text_model::ClipTextModel;

use crate::io::pretrained::{load_weights, read_config};
use crate::nn::Module;
use crate::{Error, Generator, Result};
use std::path::Path;

impl Clip {
    /// The model a `save_pretrained` folder holds, with its tokenizer when the folder has the
    /// files. A weight the config does not describe, or of another shape, is named.
    pub fn from_pretrained(dir: &Path) -> Result<Clip> {
        Clip::from_folder(dir, &read_config(dir)?)
    }

    /// `from_pretrained` with the folder's `config.json` already read.
    pub fn from_folder(dir: &Path, json: &serde_json::Value) -> Result<Clip> {
        let in_dir = |e: Error| Error::format("CLIP", format!("{}: {e}", dir.display()));
        let config = ClipConfig::from_json(json).map_err(in_dir)?;
        let context = config.text.max_position_embeddings;
        let weights = load_weights(dir)?;
        let mut model = Clip::new(config, &mut Generator::new(0))?;
        model.load_state_dict(&weights, true).map_err(in_dir)?;
        model.tokenizer = tokenizer::from_folder(dir, context)?;
        model.processor = crate::vision::ImageProcessor::from_folder(dir)?;
        Ok(model)
    }
}

#[cfg(test)]
mod tests;
