//! The directory `transformers`' `save_pretrained` writes and `from_pretrained` reads:
//!
//! - `config.json` (`LlamaForCausalLM`'s config, with the bos/eos ids when known);
//! - the weights: `model.safetensors`, or above `max_shard_size` the shards
//!   `model-00001-of-00003.safetensors`, ... with `model.safetensors.index.json`
//!   (`metadata.total_size`, and `weight_map` from tensor name to shard file);
//! - `generation_config.json` (bos/eos ids) and, when a tokenizer is given, `tokenizer.json`
//!   with the `tokenizer_config.json` that `AutoTokenizer` reads beside it (its class, the
//!   bos/eos tokens, the context length, and the chat template when there is one).
//!
//! Shards are cut as `huggingface_hub` cuts them: tensors in model order, a new shard when the
//! next tensor would push the current one past the limit, a tensor larger than the limit alone.

use super::{LmConfig, TransformerLm};
use crate::io::safetensors;
use crate::text::Tokenizer;
use crate::{DType, Device, Error, Result, Tensor};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use crate::io::pretrained::{load_weights, WEIGHTS, WEIGHTS_INDEX};
/// transformers' default `max_shard_size`, "5GB".
pub const DEFAULT_MAX_SHARD_SIZE: u64 = 5_000_000_000;

/// What `save_pretrained` writes beside the weights.
#[derive(Clone, Copy)]
pub struct PretrainedOptions<'a> {
    /// Bytes per weights file before the weights are split into shards.
    pub max_shard_size: u64,
    /// Written as `tokenizer.json`; its end-of-text token gives the eos id when none is set.
    pub tokenizer: Option<&'a Tokenizer>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    /// The Jinja chat template `apply_chat_template` renders (a loaded model's
    /// `chat_template`), written into `tokenizer_config.json`.
    pub chat_template: Option<&'a str>,
}

impl Default for PretrainedOptions<'_> {
    fn default() -> Self {
        PretrainedOptions {
            max_shard_size: DEFAULT_MAX_SHARD_SIZE,
            tokenizer: None,
            bos_id: None,
            eos_id: None,
            chat_template: None,
        }
    }
}

/// The beginning-of-text token under the names LLaMA-3, LLaMA-2/SentencePiece and Gemma use.
fn tokenizer_bos(tok: &Tokenizer) -> Option<u32> {
    ["<|begin_of_text|>", "<s>", "<bos>"]
        .iter()
        .find_map(|n| tok.special_id(n).ok())
}

/// Writes `model` to `dir` (created if needed) as `transformers` lays it out; returns the
/// weight files written. A model with LoRA adapters is refused: merge them or save them
/// apart (`peft::save_adapter`).
pub fn save_pretrained(
    model: &TransformerLm,
    dir: impl AsRef<Path>,
    opts: &PretrainedOptions,
) -> Result<Vec<PathBuf>> {
    let dir = dir.as_ref();
    if model.lora_config().is_some() {
        return Err(Error::invalid(
            "save_pretrained",
            "the model has LoRA adapters: merge_lora() first, or save them with save_adapter",
        ));
    }
    if opts.max_shard_size == 0 {
        return Err(Error::invalid(
            "save_pretrained",
            "max_shard_size must be positive",
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let bos = opts.bos_id.or(opts.tokenizer.and_then(tokenizer_bos));
    let eos = opts.eos_id.or(opts.tokenizer.and_then(Tokenizer::eos_id));
    let mut config = model.config.to_hf_json();
    let mut generation = json!({ "_from_model_config": true });
    for (key, id) in [("bos_token_id", bos), ("eos_token_id", eos)] {
        if let Some(id) = id {
            config[key] = id.into();
            generation[key] = id.into();
        }
    }
    write_json(&dir.join("config.json"), &config)?;
    write_json(&dir.join("generation_config.json"), &generation)?;
    if let Some(tok) = opts.tokenizer {
        tok.save(dir.join("tokenizer.json"))?;
        let tokenizer_config = tokenizer_config(tok, bos, eos, model, opts.chat_template);
        write_json(&dir.join("tokenizer_config.json"), &tokenizer_config)?;
    }
    // Quantized weights are written dequantized: transformers reads dense tensors.
    let named = model.checkpoint_state()?;
    let shards = shard(&named, opts.max_shard_size);
    let files = shard_file_names(shards.len());
    remove_stale_weights(dir, &files)?;
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    for (shard, file) in shards.iter().zip(&files) {
        let tensors: Vec<(String, Tensor)> = shard.iter().map(|&i| named[i].clone()).collect();
        safetensors::save(dir.join(file), &tensors, Some(meta.clone()))?;
    }
    if files.len() > 1 {
        let mut weight_map = serde_json::Map::new();
        for (shard, file) in shards.iter().zip(&files) {
            for &i in shard {
                weight_map.insert(named[i].0.clone(), file.clone().into());
            }
        }
        let total: u64 = named.iter().map(|(_, t)| byte_size(t)).sum();
        let index = json!({
            "metadata": { "total_size": total },
            "weight_map": weight_map,
        });
        write_json(&dir.join(WEIGHTS_INDEX), &index)?;
    }
    Ok(files.iter().map(|f| dir.join(f)).collect())
}

/// What `AutoTokenizer` reads beside `tokenizer.json`: without it a fast tokenizer has no
/// BOS or EOS and `apply_chat_template` raises.
fn tokenizer_config(
    tok: &Tokenizer,
    bos: Option<u32>,
    eos: Option<u32>,
    model: &TransformerLm,
    chat_template: Option<&str>,
) -> Value {
    let mut c = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model.config.max_seq_len,
        "clean_up_tokenization_spaces": false,
    });
    for (key, id) in [("bos_token", bos), ("eos_token", eos)] {
        if let Some(token) = id.and_then(|id| tok.id_to_token(id)) {
            c[key] = token.into();
        }
    }
    if let Some(t) = chat_template {
        c["chat_template"] = t.into();
    }
    c
}

fn byte_size(t: &Tensor) -> u64 {
    (t.numel() * t.dtype().size_in_bytes()) as u64
}

/// Tensor indices per shard, in order.
fn shard(named: &[(String, Tensor)], max: u64) -> Vec<Vec<usize>> {
    let mut shards: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut size = 0;
    for (i, (_, t)) in named.iter().enumerate() {
        let bytes = byte_size(t);
        if !current.is_empty() && size + bytes > max {
            shards.push(std::mem::take(&mut current));
            size = 0;
        }
        current.push(i);
        size += bytes;
    }
    if !current.is_empty() || shards.is_empty() {
        shards.push(current);
    }
    shards
}

fn shard_file_names(n: usize) -> Vec<String> {
    if n <= 1 {
        return vec![WEIGHTS.to_string()];
    }
    (1..=n)
        .map(|i| format!("model-{i:05}-of-{n:05}.safetensors"))
        .collect()
}

/// Weight files of an earlier save that this one does not overwrite: left there, a reader
/// could take an old `model.safetensors` over the new index, or the other way round.
fn remove_stale_weights(dir: &Path, keep: &[String]) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let weights = name == WEIGHTS
            || name == WEIGHTS_INDEX
            || (name.starts_with("model-") && name.ends_with(".safetensors"));
        if weights && !keep.contains(&name) {
            std::fs::remove_file(entry.path()).map_err(|e| Error::io(entry.path(), e))?;
        }
    }
    Ok(())
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).unwrap_or_default() + "\n";
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

/// A model saved by `save_pretrained` here or in `transformers`: `config.json` and the
/// weights, one file or sharded, loaded in `dtype` on `device`.
pub fn load_pretrained(
    dir: impl AsRef<Path>,
    dtype: DType,
    device: Device,
) -> Result<TransformerLm> {
    let dir = dir.as_ref();
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
    let config = LmConfig::from_json(&text)?;
    let weights = load_weights(dir)?;
    TransformerLm::from_tensors(config, &weights, dtype, device)
}

/// A size as `transformers` writes `max_shard_size`: bytes, or a number with a unit
/// ("5GB" = 5 * 10^9, "200MiB" = 200 * 2^20; KB, MB, GB, TB and KiB, MiB, GiB, TiB).
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit_bytes: f64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "KIB" => 1024.0,
        "MIB" => 1024f64.powi(2),
        "GIB" => 1024f64.powi(3),
        "TIB" => 1024f64.powi(4),
        _ => f64::NAN,
    };
    let value = number.parse::<f64>().map(|n| n * unit_bytes);
    match value {
        Ok(v) if (1.0..1e18).contains(&v) => Ok(v as u64),
        _ => Err(Error::invalid(
            "max_shard_size",
            format!("{text:?} is not a size (bytes, or a number with KB, MB, GB, KiB, MiB, GiB)"),
        )),
    }
}
