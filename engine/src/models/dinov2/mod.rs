//! DINOv2 image encoders from Hugging Face folders (`Dinov2Model`, `Dinov2WithRegistersModel`
//! and their image classifiers), with transformers' names.

pub mod config;
pub mod model;

pub use config::Dinov2Config;
pub use model::{Dinov2, Dinov2Output};

use crate::io::pretrained::{load_weights, read_config};
use crate::nn::Module;
use crate::{Error, Generator, Result};
use std::path::Path;

impl Dinov2 {
    /// The model a `save_pretrained` folder holds; a weight the config does not describe, or
    /// of another shape, is named in the error.
    pub fn from_pretrained(dir: &Path) -> Result<Dinov2> {
        Dinov2::from_folder(dir, &read_config(dir)?)
    }

    /// `from_pretrained` with the folder's `config.json` already read.
    pub fn from_folder(dir: &Path, json: &serde_json::Value) -> Result<Dinov2> {
        let in_dir = |e: Error| Error::format("DINOv2", format!("{}: {e}", dir.display()));
        let config = Dinov2Config::from_json(json).map_err(in_dir)?;
        let weights = load_weights(dir)?;
        let classifier = weights.contains_key("classifier.weight");
        let mut model = Dinov2::new(config, classifier, &mut Generator::new(0))?;
        model.processor = crate::vision::ImageProcessor::from_folder(dir)?;
        model.load_state_dict(&weights, true).map_err(in_dir)?;
        Ok(model)
    }
}
