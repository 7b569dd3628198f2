//! `ViTConfig` as transformers reads `config.json`, with its defaults (ViT-B/16 at 224²).

use crate::nn::Activation;
use crate::{Error, Result};
use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
pub struct ViTConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: Activation,
    pub layer_norm_eps: f64,
    pub image_size: usize,
    pub patch_size: usize,
    pub num_channels: usize,
    pub qkv_bias: bool,
    /// `ViTModel`'s pooler width (`pooler_output_size`, the hidden size by default).
    pub pooler_output_size: usize,
    /// Class names by index (`id2label`); empty for a backbone without a classifier.
    pub labels: Vec<String>,
}

impl Default for ViTConfig {
    fn default() -> Self {
        ViTConfig {
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: Activation::Gelu,
            layer_norm_eps: 1e-12,
            image_size: 224,
            patch_size: 16,
            num_channels: 3,
            qkv_bias: true,
            pooler_output_size: 768,
            labels: Vec::new(),
        }
    }
}

/// Sizes beyond any published ViT: a corrupt config is refused before anything is allocated.
const MAX_SIZE: usize = 1 << 16;

impl ViTConfig {
    pub fn from_json(v: &Value) -> Result<ViTConfig> {
        let d = ViTConfig::default();
        let size = |key: &str, default: usize| -> Result<usize> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(x) => x
                    .as_u64()
                    .filter(|&n| n > 0 && n as usize <= MAX_SIZE)
                    .map(|n| n as usize)
                    .ok_or_else(|| {
                        bad(format!("`{key}` must be a size in 1..={MAX_SIZE}, got {x}"))
                    }),
            }
        };
        let hidden_act = match v.get("hidden_act") {
            None => d.hidden_act,
            Some(Value::String(name)) => Activation::parse(name)
                .ok_or_else(|| bad(format!("hidden_act `{name}` is not supported")))?,
            Some(x) => return Err(bad(format!("hidden_act must be a name, got {x}"))),
        };
        if let Some(act) = v.get("pooler_act").filter(|a| !a.is_null()) {
            if act.as_str() != Some("tanh") {
                return Err(bad(format!(
                    "pooler_act {act} is not supported (only tanh)"
                )));
            }
        }
        let hidden_size = size("hidden_size", d.hidden_size)?;
        let c = ViTConfig {
            hidden_size,
            pooler_output_size: size("pooler_output_size", hidden_size)?,
            num_hidden_layers: size("num_hidden_layers", d.num_hidden_layers)?,
            num_attention_heads: size("num_attention_heads", d.num_attention_heads)?,
            intermediate_size: size("intermediate_size", d.intermediate_size)?,
            hidden_act,
            layer_norm_eps: v
                .get("layer_norm_eps")
                .and_then(Value::as_f64)
                .unwrap_or(d.layer_norm_eps),
            image_size: size("image_size", d.image_size)?,
            patch_size: size("patch_size", d.patch_size)?,
            num_channels: size("num_channels", d.num_channels)?,
            qkv_bias: v.get("qkv_bias").and_then(Value::as_bool).unwrap_or(true),
            labels: labels(v)?,
        };
        if !c.hidden_size.is_multiple_of(c.num_attention_heads) {
            return Err(bad(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                c.hidden_size, c.num_attention_heads
            )));
        }
        Ok(c)
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Patches along each side of the configured image.
    pub fn grid(&self) -> usize {
        self.image_size / self.patch_size
    }
}

fn bad(msg: String) -> Error {
    Error::format("ViT config.json", msg)
}

/// `id2label` ({"0": "cat", ...}) as a list by index; `num_labels` alone gives LABEL_i names.
fn labels(v: &Value) -> Result<Vec<String>> {
    if let Some(map) = v.get("id2label").and_then(Value::as_object) {
        let mut out = vec![String::new(); map.len()];
        for (k, name) in map {
            let i: usize = k.parse().ok().filter(|&i| i < map.len()).ok_or_else(|| {
                bad(format!(
                    "id2label key `{k}` is not an index below {}",
                    map.len()
                ))
            })?;
            out[i] = name.as_str().unwrap_or_default().to_string();
        }
        return Ok(out);
    }
    let n = v.get("num_labels").and_then(Value::as_u64).unwrap_or(0) as usize;
    Ok((0..n.min(MAX_SIZE)).map(|i| format!("LABEL_{i}")).collect())
}
