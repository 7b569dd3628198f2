//! CLIP from Hugging Face folders (`CLIPModel`: config.json + model.safetensors, sharded, or
//! pytorch_model.bin, the tokenizer files and preprocessor_config.json), with transformers' names, and what people use
//! it for: image and text embeddings, and zero-shot classification.

pub mod config;
pub mod model;
pub mod tokenizer;

pub use config::ClipConfig;
pub use model::{Clip, TextTower, TowerOutput, VisionTower};
pub use tokenizer::ClipTokenizer;

use crate::io::pretrained::{load_weights, read_config};
use crate::nn::Module;
use crate::{Error, Generator, Result, Tensor};
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
        model.tokenizer = ClipTokenizer::from_folder(dir, context)?;
        model.processor = crate::vision::ImageProcessor::from_folder(dir)?;
        Ok(model)
    }

    fn tokenizer(&self) -> Result<&ClipTokenizer> {
        self.tokenizer.as_ref().ok_or_else(|| {
            Error::invalid(
                "CLIP",
                "the model has no tokenizer (its folder has neither tokenizer.json nor vocab.json + merges.txt)",
            )
        })
    }

    /// Texts → their joint-space embeddings [texts, projection_dim] (not normalised).
    pub fn embed_texts(&self, texts: &[&str]) -> Result<Tensor> {
        let ids = self.tokenizer()?.encode_batch(texts)?;
        self.text_features(&ids.to_device(self.logit_scale().device())?)
    }

    /// Zero-shot classification: for each image [B, C, H, W], the probability of each label,
    /// scored as the text `template` with `{}` replaced by the label ([B, labels]).
    pub fn zero_shot(&self, images: &Tensor, labels: &[&str], template: &str) -> Result<Tensor> {
        if labels.is_empty() {
            return Err(Error::invalid("zero_shot", "needs at least one label"));
        }
        if !template.contains("{}") {
            return Err(Error::invalid(
                "zero_shot",
                format!("the template `{template}` has no {{}} for the label"),
            ));
        }
        let prompts: Vec<String> = labels.iter().map(|l| template.replace("{}", l)).collect();
        let prompts: Vec<&str> = prompts.iter().map(String::as_str).collect();
        let texts = self.embed_texts(&prompts)?;
        self.scores(&self.image_features(images)?, &texts)?
            .softmax(-1)
    }
}

#[cfg(test)]
mod tests;
