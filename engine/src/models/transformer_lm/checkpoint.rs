//! Training checkpoints: one safetensors file with the model's weights under Hugging Face's
//! names, the optimizer's state tensors under `optimizer.`, and a JSON header (the safetensors
//! metadata entry `rusting_brain`) with the config, the step, the data position, the
//! optimizer's scalars and its schedule. Loading the weights alone works with any safetensors
//! reader; `transformers` needs only the config, which `config_json` gives as its
//! `config.json`.

use super::{LmConfig, LoraConfig, TransformerLm};
use crate::io::safetensors;
use crate::nn::Module;
use crate::optim::{Optimizer, OptimizerState, Schedule};
use crate::{DType, Device, Error, Result, Tensor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

const HEADER_KEY: &str = "rusting_brain";
const OPTIMIZER_PREFIX: &str = "optimizer.";
const VERSION: u32 = 1;

/// Where training stands, beyond the weights and optimizer state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Optimizer steps taken.
    pub step: u64,
    /// The data stream's seed; with the step it fixes which windows come next.
    pub data_seed: u64,
    /// Anything else the script wants back (its options, its loss history).
    #[serde(default)]
    pub extra: Value,
}

#[derive(Serialize, Deserialize)]
struct OptimizerHeader {
    kind: String,
    scalars: BTreeMap<String, f64>,
    schedule: Option<Schedule>,
    max_grad_norm: Option<f64>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    version: u32,
    config: Value,
    train: TrainState,
    optimizer: Option<OptimizerHeader>,
    /// The adapters' config when the weights include LoRA adapters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lora: Option<LoraConfig>,
}

/// A loaded checkpoint.
pub struct Checkpoint {
    pub config: LmConfig,
    /// Weights in Hugging Face's names, on the CPU, in the dtype they were saved in.
    pub weights: BTreeMap<String, Tensor>,
    pub train: TrainState,
    /// Set when the weights include LoRA adapters: `model()` adds them back.
    pub lora: Option<LoraConfig>,
    optimizer: Option<(OptimizerState, Option<Schedule>, Option<f64>)>,
}

/// Writes `model` (and `opt`'s state, if given) with `train` to `path`, atomically.
pub fn save(
    path: impl AsRef<Path>,
    model: &TransformerLm,
    opt: Option<&dyn Optimizer>,
    train: &TrainState,
) -> Result<()> {
    // Under `brain launch` every rank calls this and rank 0 writes, once every rank has taken
    // part in gathering a sharded optimizer state; each returns once the file is there, or
    // with rank 0's error.
    let dist = crate::dist::current()?;
    let gathers = opt.is_some_and(|o| o.core().shard().is_some_and(|s| s.world_size > 1));
    let gathered = match opt {
        Some(o) if gathers && !dist.is_main() => o.join_state_gather(),
        _ => Ok(()),
    };
    dist.on_main(gathered, || write(path.as_ref(), model, opt, train))
}

fn write(
    path: &Path,
    model: &TransformerLm,
    opt: Option<&dyn Optimizer>,
    train: &TrainState,
) -> Result<()> {
    let mut tensors: Vec<(String, Tensor)> = model.state_dict().into_iter().collect();
    let optimizer = match opt {
        Some(o) => {
            let state = o.state_dict()?;
            tensors.extend(
                state
                    .tensors
                    .iter()
                    .map(|(k, t)| (format!("{OPTIMIZER_PREFIX}{k}"), t.clone())),
            );
            Some(OptimizerHeader {
                kind: state.kind.clone(),
                scalars: state.scalars.clone(),
                schedule: o.core().schedule.clone(),
                max_grad_norm: o.core().max_grad_norm,
            })
        }
        None => None,
    };
    let header = Header {
        version: VERSION,
        config: model.config.to_hf_json(),
        train: train.clone(),
        optimizer,
        lora: model.lora_config().cloned(),
    };
    let json = serde_json::to_string(&header)
        .map_err(|e| Error::format("checkpoint", format!("header: {e}")))?;
    let metadata = HashMap::from([
        ("format".to_string(), "pt".to_string()),
        (HEADER_KEY.to_string(), json),
    ]);
    safetensors::save(path, &tensors, Some(metadata))
}

/// Reads a checkpoint written by `save`.
pub fn load(path: impl AsRef<Path>) -> Result<Checkpoint> {
    let path = path.as_ref();
    let loaded = safetensors::load_with_metadata(path)?;
    let bad = |msg: String| Error::format("checkpoint", format!("{}: {msg}", path.display()));
    let text = loaded.metadata.get(HEADER_KEY).ok_or_else(|| {
        bad(format!(
            "no `{HEADER_KEY}` header: not a RustingBrain checkpoint (for bare weights use a \
             config.json beside them)"
        ))
    })?;
    let header: Header = serde_json::from_str(text).map_err(|e| bad(format!("header: {e}")))?;
    if header.version > VERSION {
        return Err(bad(format!(
            "written by a newer version ({} > {VERSION})",
            header.version
        )));
    }
    let config = LmConfig::from_json(&header.config.to_string())?;
    let (mut weights, mut opt_tensors) = (BTreeMap::new(), BTreeMap::new());
    for (name, t) in loaded.tensors {
        match name.strip_prefix(OPTIMIZER_PREFIX) {
            Some(key) => opt_tensors.insert(key.to_string(), t),
            None => weights.insert(name, t),
        };
    }
    let optimizer = header.optimizer.map(|o| {
        let state = OptimizerState {
            kind: o.kind,
            tensors: opt_tensors,
            scalars: o.scalars,
        };
        (state, o.schedule, o.max_grad_norm)
    });
    Ok(Checkpoint {
        config,
        weights,
        train: header.train,
        lora: header.lora,
        optimizer,
    })
}

impl Checkpoint {
    /// The model, with its weights cast to `dtype` on `device` (and its LoRA adapters, if it
    /// was saved with them).
    pub fn model(&self, dtype: DType, device: Device) -> Result<TransformerLm> {
        TransformerLm::from_tensors_with_lora(
            self.config.clone(),
            &self.weights,
            self.lora.as_ref(),
            dtype,
            device,
        )
    }

    pub fn has_optimizer(&self) -> bool {
        self.optimizer.is_some()
    }

    /// Restores the saved optimizer state, schedule and clipping into `opt` (made over the
    /// parameters of `model()` in the same order).
    pub fn restore_optimizer(&self, opt: &mut dyn Optimizer) -> Result<()> {
        let (state, schedule, clip) = self
            .optimizer
            .as_ref()
            .ok_or_else(|| Error::format("checkpoint", "it was saved without optimizer state"))?;
        opt.load_state_dict(state)?;
        opt.set_schedule(schedule.clone())?;
        opt.set_max_grad_norm(*clip)
    }
}

/// The config as `transformers`' `config.json`, for exporting the weights.
pub fn config_json(config: &LmConfig) -> String {
    serde_json::to_string_pretty(&config.to_hf_json()).unwrap_or_default()
}
