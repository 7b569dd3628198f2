//! Checkpoints from scripts: `model.save(path, #{ optimizer, step, data_seed, extra })`,
//! `lm::load(path)` (a `Checkpoint` value: its model, step, data seed, extra, and the optimizer
//! state to restore), and the Hugging Face layout (`model.save_pretrained(dir)`, `lm::load_pretrained`).

use super::model::Lm;
use crate::error::{guard, runtime_error, RhaiResult};
use crate::optim::Optim;
use crate::options::OptionValue;
use rhai::{Dynamic, Map, INT};
use rusting_brain::models::transformer_lm::checkpoint::{self, Checkpoint};
use rusting_brain::models::transformer_lm::pretrained::{self, PretrainedOptions};
use rusting_brain::models::transformer_lm::TrainState;
use rusting_brain::text::Tokenizer;
use rusting_brain::DType;
use std::sync::Arc;

#[derive(Clone)]
pub struct ScriptCheckpoint(pub Arc<Checkpoint>);

crate::options! {
    struct SaveOptions {
        optimizer: Optim,
        step: u64 = 0,
        data_seed: u64 = 0,
        /// Anything JSON holds, kept in the checkpoint.
        extra: Dynamic,
    }
}

pub fn save(m: &mut Lm, path: &str, opts: Map) -> RhaiResult<String> {
    let o = SaveOptions::parse("save", opts)?;
    let opt = o.optimizer;
    let extra = match &o.extra {
        Some(v) => rhai::serde::from_dynamic::<serde_json::Value>(v)
            .map_err(|e| runtime_error(format!("save option extra: {e}")))?,
        None => serde_json::Value::Null,
    };
    let state = TrainState {
        step: o.step,
        data_seed: o.data_seed,
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

crate::options! {
    struct SavePretrainedOptions {
        tokenizer: Tokenizer,
        /// Bytes, or a size such as "5GB".
        max_shard_size: Dynamic,
        bos_id: u32,
        eos_id: u32,
        chat_template: String,
    }
}

/// Writes the model as `transformers` lays it out (`config.json`, `generation_config.json`,
/// the weights, sharded above `max_shard_size`, and `tokenizer.json` when one is given).
pub fn save_pretrained(m: &mut Lm, dir: &str, opts: Map) -> RhaiResult<String> {
    let o = SavePretrainedOptions::parse("save_pretrained", opts)?;
    let max_shard_size = match &o.max_shard_size {
        None => pretrained::DEFAULT_MAX_SHARD_SIZE,
        Some(v) => match v.clone().into_string() {
            Ok(text) => guard(|| pretrained::parse_size(&text))?,
            Err(_) => u64::from_option(v, "save_pretrained option max_shard_size")?,
        },
    };
    let options = PretrainedOptions {
        max_shard_size,
        tokenizer: o.tokenizer.as_ref(),
        bos_id: o.bos_id,
        eos_id: o.eos_id,
        chat_template: o.chat_template.as_deref(),
    };
    guard(|| pretrained::save_pretrained(&m.lock(), dir, &options))?;
    Ok(dir.to_string())
}

pub fn load_pretrained(dir: &str) -> RhaiResult<Lm> {
    let device = crate::tensor::default_device();
    guard(|| pretrained::load_pretrained(dir, DType::F32, device)).map(Lm::new)
}
