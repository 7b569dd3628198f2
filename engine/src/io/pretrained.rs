//! The weights of a folder as `transformers`' `save_pretrained` writes it, for every family that
//! loads Hugging Face checkpoints: `model.safetensors`, the shards that
//! `model.safetensors.index.json` lists, or (older checkpoints) `pytorch_model.bin` through the
//! restricted PyTorch reader.

use super::{any::load_any, safetensors};
use crate::{Error, Result, Tensor};
use std::collections::BTreeMap;
use std::path::Path;

pub const WEIGHTS: &str = "model.safetensors";
pub const WEIGHTS_INDEX: &str = "model.safetensors.index.json";
pub const TORCH_WEIGHTS: &str = "pytorch_model.bin";

/// Every tensor of the folder's weights, by name.
pub fn load_weights(dir: &Path) -> Result<BTreeMap<String, Tensor>> {
    load_weights_named(dir, "model")
}

/// Every tensor of the folder's weights under the file stem `stem` (transformers' `model`,
/// diffusers' `diffusion_pytorch_model`): `STEM.safetensors`, the shards its
/// `STEM.safetensors.index.json` lists, or the PyTorch pickle (`pytorch_model.bin` for
/// transformers' stem, `STEM.bin` otherwise).
pub fn load_weights_named(dir: &Path, stem: &str) -> Result<BTreeMap<String, Tensor>> {
    let single = dir.join(format!("{stem}.safetensors"));
    if single.exists() {
        return safetensors::load(single);
    }
    let index_path = dir.join(format!("{stem}.safetensors.index.json"));
    if index_path.exists() {
        return safetensors::load_sharded(&index_path);
    }
    let torch = match stem {
        "model" => TORCH_WEIGHTS.to_string(),
        _ => format!("{stem}.bin"),
    };
    let torch_path = dir.join(&torch);
    if torch_path.exists() {
        return Ok(load_any(torch_path)?.into_iter().collect());
    }
    Err(Error::format(
        "pretrained",
        format!(
            "{}: none of {stem}.safetensors, {stem}.safetensors.index.json or {torch}",
            dir.display()
        ),
    ))
}

/// The folder's `config.json` as JSON.
pub fn read_config(dir: &Path) -> Result<serde_json::Value> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::format("config.json", format!("{}: {e}", path.display())))
}
