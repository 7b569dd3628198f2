//! What our safetensors files say about the YOLO network in them, in one place: the metadata
//! keys, the model description every file carries (its YAML, class names and whether its
//! convolutions have batch norms folded in), and the keys a training checkpoint adds (its
//! header, and the EMA's weights under `ema.`). `weights.rs` writes and reads model files,
//! `train/checkpoint.rs` training checkpoints; both go through here.

use super::config::YoloConfig;
use super::network::YoloModel;
use crate::{Error, Result};
use std::collections::HashMap;

pub const META_YAML: &str = "yolo.yaml";
pub const META_NAMES: &str = "yolo.names";
pub const META_FUSED: &str = "yolo.fused";
/// A training checkpoint's JSON header.
pub const META_TRAIN: &str = "yolo.train";
/// The prefix of a training checkpoint's EMA weights.
pub const EMA_PREFIX: &str = "ema.";

/// The metadata that describes `model`: enough to rebuild the network from the file alone.
pub fn model_metadata(model: &YoloModel) -> Result<HashMap<String, String>> {
    let names = serde_json::to_string(&model.names)
        .map_err(|e| Error::invalid("yolo save", e.to_string()))?;
    Ok(HashMap::from([
        (META_YAML.to_string(), model.config.to_yaml_string()),
        (META_NAMES.to_string(), names),
        (META_FUSED.to_string(), model.fused.to_string()),
    ]))
}

/// The network a file's metadata describes: its definition, class names and whether it is
/// fused. `origin` names the file in errors.
pub fn described_model(
    metadata: &HashMap<String, String>,
    origin: &str,
) -> Result<(YoloConfig, Vec<String>, bool)> {
    let get = |key: &str| {
        metadata.get(key).ok_or_else(|| {
            Error::invalid(
                "yolo load",
                format!(
                    "{origin}: the metadata has no `{key}`; this file was not saved as a YOLO model"
                ),
            )
        })
    };
    let config = YoloConfig::from_yaml_str(get(META_YAML)?, origin, None, None)?;
    let names: Vec<String> = serde_json::from_str(get(META_NAMES)?)
        .map_err(|e| Error::invalid("yolo load", format!("{origin}: `{META_NAMES}`: {e}")))?;
    let fused = metadata.get(META_FUSED).is_some_and(|v| v == "true");
    Ok((config, names, fused))
}
