//! Checkpoints from scripts: `model.save(path, #{ optimizer, step, data_seed, extra })`,
//! `lm::load(path)` (a `Checkpoint` value: its model, step, data seed, extra, and the optimizer
//! state to restore), and the Hugging Face layout (`model.save_pretrained(dir)`, `lm::load_pretrained`).

use super::model::Lm;
use crate::error::{guard, runtime_error, RhaiResult};
use crate::optim::Optim;
use crate::options::Options;
use rhai::{Dynamic, Map, INT};
use rusting_brain::models::transformer_lm::checkpoint::{self, Checkpoint};
use rusting_brain::models::transformer_lm::pretrained::{self, PretrainedOptions};
use rusting_brain::models::transformer_lm::TrainState;
use rusting_brain::text::Tokenizer;
use rusting_brain::DType;
use std::sync::Arc;

#[derive(Clone)]
pub struct ScriptCheckpoint(pub Arc<Checkpoint>);

pub fn save(m: &mut Lm, path: &str, opts: Map) -> RhaiResult<String> {
    let o = Options::new("save", opts, &["optimizer", "step", "data_seed", "extra"])?;
    let opt = match o.get("optimizer") {
        Some(v) => Some(v.clone().try_cast::<Optim>().ok_or_else(|| {
            runtime_error(format!(
                "save option optimizer: expected an Optimizer, got {}",
                v.type_name()
            ))
        })?),
        None => None,
    };
    let extra = match o.get("extra") {
        Some(v) => rhai::serde::from_dynamic::<serde_json::Value>(v)
            .map_err(|e| runtime_error(format!("save option extra: {e}")))?,
        None => serde_json::Value::Null,
    };
    let state = TrainState {
        step: o.int("step", 0)?.max(0) as u64,
        data_seed: o.int("data_seed", 0)?.max(0) as u64,
        extra,
    };
    make_parent(path)?;
    let model = m.lock();
    let guard_opt = opt.as_ref().map(|o| o.lock());
    guard(|| checkpoint::save(path, &model, guard_opt.as_deref().map(|b| &**b), &state))?;
    Ok(path.to_string())
}

fn make_parent(path: &str) -> RhaiResult<()> {
    if let Some(dir) = std::path::Path::new(path)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir)
            .map_err(|e| runtime_error(format!("cannot create {}: {e}", dir.display())))?;
    }
    Ok(())
}

pub fn load(path: &str) -> RhaiResult<ScriptCheckpoint> {
    guard(|| checkpoint::load(path)).map(|c| ScriptCheckpoint(Arc::new(c)))
}

/// The checkpoint's model in F32 on the script's device.
pub fn model(c: &mut ScriptCheckpoint) -> RhaiResult<Lm> {
    let device = crate::tensor::default_device();
    guard(|| c.0.model(DType::F32, device)).map(Lm::new)
}

pub fn restore(c: &mut ScriptCheckpoint, opt: Optim) -> RhaiResult<()> {
    let mut o = opt.lock();
    guard(|| c.0.restore_optimizer(&mut **o))
}

pub fn step(c: &mut ScriptCheckpoint) -> INT {
    c.0.train.step as INT
}

pub fn data_seed(c: &mut ScriptCheckpoint) -> INT {
    c.0.train.data_seed as INT
}

pub fn extra(c: &mut ScriptCheckpoint) -> RhaiResult<Dynamic> {
    rhai::serde::to_dynamic(&c.0.train.extra).map_err(|e| runtime_error(format!("extra: {e}")))
}

pub fn config(c: &mut ScriptCheckpoint) -> Map {
    super::model::config_map(&c.0.config)
}

/// Writes the model as `transformers` lays it out (`config.json`, `generation_config.json`,
/// the weights, sharded above `max_shard_size`, and `tokenizer.json` when one is given).
pub fn save_pretrained(m: &mut Lm, dir: &str, opts: Map) -> RhaiResult<String> {
    let o = Options::new(
        "save_pretrained",
        opts,
        &[
            "tokenizer",
            "max_shard_size",
            "bos_id",
            "eos_id",
            "chat_template",
        ],
    )?;
    let tokenizer = match o.get("tokenizer") {
        Some(v) => Some(v.clone().try_cast::<Tokenizer>().ok_or_else(|| {
            runtime_error(format!(
                "save_pretrained option tokenizer: expected a Tokenizer, got {}",
                v.type_name()
            ))
        })?),
        None => None,
    };
    let max_shard_size = match o.get("max_shard_size") {
        None => pretrained::DEFAULT_MAX_SHARD_SIZE,
        Some(v) if v.is_string() => {
            let text = o.string("max_shard_size")?.unwrap_or_default();
            guard(|| pretrained::parse_size(&text))?
        }
        Some(_) => o.usize("max_shard_size", 0)? as u64,
    };
    let id = |key: &str| -> RhaiResult<Option<u32>> {
        match o.get(key) {
            None => Ok(None),
            Some(_) => u32::try_from(o.int(key, 0)?).map(Some).map_err(|_| {
                runtime_error(format!("save_pretrained option {key}: not a token id"))
            }),
        }
    };
    let chat_template = o.string("chat_template")?;
    let options = PretrainedOptions {
        max_shard_size,
        tokenizer: tokenizer.as_ref(),
        bos_id: id("bos_id")?,
        eos_id: id("eos_id")?,
        chat_template: chat_template.as_deref(),
    };
    guard(|| pretrained::save_pretrained(&m.lock(), dir, &options))?;
    Ok(dir.to_string())
}

pub fn load_pretrained(dir: &str) -> RhaiResult<Lm> {
    let device = crate::tensor::default_device();
    guard(|| pretrained::load_pretrained(dir, DType::F32, device)).map(Lm::new)
}
