//! A Hugging Face folder's model by its `config.json`'s `model_type`, for callers that take
//! whichever family the folder holds (`vision::load` in scripts).

use super::clip::Clip;
use super::dinov2::Dinov2;
use super::vit::ViT;
use crate::io::pretrained::read_config;
use crate::nn::Module;
use crate::{Error, Result};
use std::path::Path;

/// The `model_type`s `load_image_model` reads.
pub const IMAGE_MODEL_TYPES: &[&str] = &["vit", "deit", "dinov2", "dinov2_with_registers", "clip"];

/// The image model a `save_pretrained` folder holds.
pub fn load_image_model(dir: &Path) -> Result<Box<dyn Module>> {
    let config = read_config(dir)?;
    let kind = config
        .get("model_type")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    match kind {
        "vit" | "deit" => Ok(Box::new(ViT::from_folder(dir, &config)?)),
        "dinov2" | "dinov2_with_registers" => Ok(Box::new(Dinov2::from_folder(dir, &config)?)),
        "clip" => Ok(Box::new(Clip::from_folder(dir, &config)?)),
        other => Err(Error::format(
            "load",
            format!(
                "{}: model_type `{other}` is not an image model this reads (it reads {})",
                dir.display(),
                IMAGE_MODEL_TYPES.join(", ")
            ),
        )),
    }
}
