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
    let single = dir.join(WEIGHTS);
    if single.exists() {
        return safetensors::load(single);
    }
    let index_path = dir.join(WEIGHTS_INDEX);
    if index_path.exists() {
        return safetensors::load_sharded(&index_path);
    }
    let torch = dir.join(TORCH_WEIGHTS);
    if torch.exists() {
        return Ok(load_any(torch)?.into_iter().collect());
    }
    Err(Error::format(
        "pretrained",
        format!(
            "{}: none of {WEIGHTS}, {WEIGHTS_INDEX} or {TORCH_WEIGHTS}",
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
