//! Sharded safetensors checkpoints: `model.safetensors.index.json` (`weight_map` from tensor
//! name to shard file) and the shards beside it, as transformers writes them.

use crate::{Error, Result, Tensor};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every tensor of the shards `index_path` lists, checked against the index: each name in the
/// shard the index maps it to, and no shard holding a name the index does not list.
pub fn load_sharded(index_path: &Path) -> Result<BTreeMap<String, Tensor>> {
    let bad =
        |msg: String| Error::format("safetensors", format!("{}: {msg}", index_path.display()));
    let dir = index_path.parent().unwrap_or(Path::new("."));
    let text = std::fs::read_to_string(index_path).map_err(|e| Error::io(index_path, e))?;
    let index: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let map = index
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no weight_map object".into()))?;
    let mut by_file: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (name, file) in map {
        let file = file
            .as_str()
            .ok_or_else(|| bad(format!("weight_map[{name:?}] is not a file name")))?;
        // Shards sit beside the index: a path elsewhere is refused, not followed.
        if file.contains(['/', '\\']) || file == ".." || file.is_empty() {
            return Err(bad(format!(
                "shard name {file:?} is not a file in the directory"
            )));
        }
        by_file.entry(file).or_default().insert(name.as_str());
    }
    let mut weights = BTreeMap::new();
    for (file, names) in by_file {
        let path = dir.join(file);
        if !path.exists() {
            return Err(bad(format!("the shard {file} it lists is missing")));
        }
        let tensors = super::load(&path)?;
        if let Some(name) = names.iter().find(|n| !tensors.contains_key(**n)) {
            return Err(bad(format!("{name} is mapped to {file}, which lacks it")));
        }
        if let Some(name) = tensors.keys().find(|n| !names.contains(n.as_str())) {
            return Err(bad(format!(
                "{file} holds {name}, which the index does not list"
            )));
        }
        weights.extend(tensors);
    }
    Ok(weights)
}
