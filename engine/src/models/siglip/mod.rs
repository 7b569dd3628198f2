//! SigLIP from Hugging Face folders (`SiglipModel`: config.json + model.safetensors, sharded,
//! or pytorch_model.bin, spiece.model and preprocessor_config.json), with transformers' names:
//! image and text embeddings, the sigmoid-scored pairs and zero-shot classification.

pub mod config;
pub mod model;
pub mod tokenizer;

pub use config::SiglipConfig;
pub use model::Siglip;

use crate::io::pretrained::{load_weights, read_config};
use crate::nn::Module;
use crate::{Error, Generator, Result};
use std::path::Path;

impl Siglip {
    /// The model a `save_pretrained` folder holds; a weight the config does not describe, or
    /// of another shape, is named.
    pub fn from_pretrained(dir: &Path) -> Result<Siglip> {
        Siglip::from_folder(dir, &read_config(dir)?)
    }

    /// `from_pretrained` with the folder's `config.json` already read.
    pub fn from_folder(dir: &Path, json: &serde_json::Value) -> Result<Siglip> {
        let in_dir = |e: Error| Error::format("SigLIP", format!("{}: {e}", dir.display()));
        let config = SiglipConfig::from_json(json).map_err(in_dir)?;
        let weights = load_weights(dir)?;
        let mut model = Siglip::new(config, &mut Generator::new(0)).map_err(in_dir)?;
        model.load_state_dict(&weights, true).map_err(in_dir)?;
        let context = model.config.text.max_position_embeddings;
        model.tokenizer = tokenizer::from_folder(dir, context)?;
        model.processor = crate::vision::ImageProcessor::from_folder(dir)?;
        Ok(model)
    }
}
