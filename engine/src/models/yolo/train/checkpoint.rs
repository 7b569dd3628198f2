//! Training checkpoints of `YoloTrainer`: `last` after every epoch (and on Ctrl-C), `best` on
//! a new best fitness.
//!
//! `<which>.safetensors` holds the model's weights under ultralytics' names, the EMA under
//! `ema.`, each optimizer group's state under `optimizer.pg<i>.`, and gradients still being
//! accumulated under `grad.`; its metadata has the model YAML and class names (so
//! `YoloModel::load` rebuilds the network, taking the EMA as ultralytics does) and a JSON
//! header `yolo.train` with the epoch, the optimizer's kind and scalars, the EMA's update
//! count, the schedule's position, best fitness, the results so far and the settings.
//! `resume` continues at the next epoch with the schedule, optimizer, EMA and data order an
//! uninterrupted run would have.
//!
//! `<which>.pt` is the EMA as an ultralytics checkpoint (`YoloModel::save_ultralytics_pt`).

use super::epoch::EpochValidation;
use super::optimizer_choice::{OptimizerChoice, OptimizerKind};
use super::results_csv::{EpochRow, DETECT_COLUMNS};
use super::settings::TrainSettings;
use super::trainer::{lock, YoloTrainer};
use crate::io::safetensors;
use crate::models::yolo::saved::{described_model, model_metadata, EMA_PREFIX, META_TRAIN};
use crate::models::yolo::{PtMeta, YoloModel};
use crate::nn::Module;
use crate::optim::OptimizerState;
use crate::{Device, Error, Result, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

const OPTIMIZER_PREFIX: &str = "optimizer.pg";
const GRAD_PREFIX: &str = "grad.";
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct GroupHeader {
    kind: String,
    scalars: BTreeMap<String, f64>,
}

#[derive(Serialize, Deserialize)]
struct TrainHeader {
    version: u32,
    /// The next epoch to run, from 0.
    epoch: usize,
    last_step: Option<usize>,
    best_fitness: Option<f64>,
    /// `sgd` or `adamw`, and what the choice settled (lr0, momentum, warmup bias lr).
    optimizer: String,
    lr0: f64,
    momentum: f64,
    warmup_bias_lr: f64,
    groups: Vec<GroupHeader>,
    ema_updates: u64,
    time: f64,
    history: Vec<EpochRow>,
    settings: TrainSettings,
}

fn bad(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::format(
        "yolo training checkpoint",
        format!("{}: {msg}", path.display()),
    )
}

impl YoloTrainer {
    /// A run continued from a checkpoint written by a trainer: the model rebuilt from its
    /// YAML, the run's settings, optimizer, EMA and position restored.
    pub fn resume(path: &Path, device: Device) -> Result<YoloTrainer> {
        let loaded = safetensors::load_with_metadata(path)?;
        let header = read_header(path, &loaded.metadata)?;
        // A checkpoint trains the unfused network whatever its metadata says.
        let (config, names, _) = described_model(&loaded.metadata, &path.display().to_string())?;
        // The checkpoint holds the model, its EMA and the optimizer's state: a bound of them
        // all, still far below what a hostile definition could ask for.
        let model = YoloModel::build_for_weights(&config, names, false, &loaded.tensors)?;
        let mut trainer =
            YoloTrainer::new(Arc::new(Mutex::new(model)), header.settings.clone(), device)?;
        trainer.restore(path, header, loaded.tensors)?;
        Ok(trainer)
    }

    /// Restores this run's state from a checkpoint of the same model and settings (the
    /// epoch, weights, optimizer, EMA, results); the next `epoch` continues from there.
    pub fn load_checkpoint(&mut self, path: &Path) -> Result<()> {
        let loaded = safetensors::load_with_metadata(path)?;
        let header = read_header(path, &loaded.metadata)?;
        // Batches loaded ahead belong to the run as it was; the checkpoint decides what's next.
        self.prefetched = None;
        self.restore(path, header, loaded.tensors)
    }

    fn restore(
        &mut self,
        path: &Path,
        header: TrainHeader,
        tensors: BTreeMap<String, Tensor>,
    ) -> Result<()> {
        let kind = match self.optimizer.kind() {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::AdamW => "adamw",
        };
        if header.optimizer != kind || header.groups.len() != 3 {
            return Err(bad(
                path,
                format!(
                    "it was trained with {} ({} groups), this run with {kind} (3 groups)",
                    header.optimizer,
                    header.groups.len()
                ),
            ));
        }
        if header.epoch > self.settings.epochs {
            return Err(bad(
                path,
                format!(
                    "it is at epoch {} of a run this trainer has only {} epochs for",
                    header.epoch, self.settings.epochs
                ),
            ));
        }
        let mut weights = BTreeMap::new();
        let mut ema = BTreeMap::new();
        let mut grads = BTreeMap::new();
        let mut groups: Vec<BTreeMap<String, Tensor>> = vec![BTreeMap::new(); 3];
        for (name, t) in tensors {
            if let Some(k) = name.strip_prefix(EMA_PREFIX) {
                ema.insert(k.to_string(), t);
            } else if let Some(k) = name.strip_prefix(GRAD_PREFIX) {
                grads.insert(k.to_string(), t);
            } else if let Some(rest) = name.strip_prefix(OPTIMIZER_PREFIX) {
                let (g, key) = rest
                    .split_once('.')
                    .and_then(|(g, k)| Some((g.parse::<usize>().ok()?, k)))
                    .filter(|(g, _)| *g < 3)
                    .ok_or_else(|| bad(path, format!("unexpected optimizer tensor {name}")))?;
                groups[g].insert(key.to_string(), t);
            } else {
                // A copy never crosses devices: the file's tensors go where the model is.
                weights.insert(name, t.to_device(self.device)?);
            }
        }
        let origin = path.display().to_string();
        {
            let model = lock(&self.model);
            model.load_weights(&weights, &origin)?;
            let params = model.named_parameters();
            for (name, g) in &grads {
                let (_, p) = params
                    .iter()
                    .find(|(n, _)| n == name)
                    .ok_or_else(|| bad(path, format!("a gradient for unknown parameter {name}")))?;
                if g.shape() != p.shape() {
                    return Err(bad(path, format!("the gradient of {name} is mis-shaped")));
                }
                p.set_grad(Some(g.to_device(p.device())?.to_dtype(p.dtype())?));
            }
        }
        let ema_state = ema
            .into_iter()
            .map(|(k, t)| Ok((k, t.to_device(self.device)?)))
            .collect::<Result<BTreeMap<_, _>>>()?;
        self.ema.load_state(&ema_state, header.ema_updates)?;
        for ((opt, g), tensors) in self
            .optimizer
            .groups_mut()
            .into_iter()
            .zip(header.groups)
            .zip(groups)
        {
            opt.load_state_dict(&OptimizerState {
                kind: g.kind,
                tensors,
                scalars: g.scalars,
            })?;
        }
        self.choice = OptimizerChoice {
            lr0: header.lr0,
            momentum: header.momentum,
            warmup_bias_lr: header.warmup_bias_lr,
            ..self.choice
        };
        self.epoch = header.epoch;
        self.last_step = header.last_step;
        self.best_fitness = header.best_fitness;
        self.history = header.history;
        self.time_before = header.time;
        Ok(())
    }

    /// Writes `last` (and `best` when `is_best`) after a finished epoch.
    pub(super) fn save_epoch(&self, is_best: bool, v: &EpochValidation) -> Result<()> {
        let metrics = vec![
            ("metrics/precision(B)".to_string(), v.precision),
            ("metrics/recall(B)".to_string(), v.recall),
            ("metrics/mAP50(B)".to_string(), v.map50),
            ("metrics/mAP50-95(B)".to_string(), v.map),
            ("fitness".to_string(), v.fitness),
        ];
        let names: &[&str] = if is_best {
            &["last", "best"]
        } else {
            &["last"]
        };
        for which in names {
            self.save_checkpoint(which, self.epoch, self.last_step, true)?;
            self.save_pt(which, &metrics)?;
        }
        Ok(())
    }

    /// `last` after a cancel during `epoch`: the weights as they are, marked to train that
    /// epoch again (its partial gradients are dropped). The trainer itself is left the same
    /// way, so a later `epoch` call trains that epoch again with its usual step cadence.
    pub(super) fn save_cancelled(&mut self, epoch: usize) -> Result<()> {
        self.optimizer.zero_grad();
        self.last_step = (epoch * self.schedule.batches_per_epoch).checked_sub(1);
        self.save_checkpoint("last", epoch, self.last_step, false)?;
        self.save_pt("last", &[])
    }

    fn save_checkpoint(
        &self,
        which: &str,
        epoch: usize,
        last_step: Option<usize>,
        with_grads: bool,
    ) -> Result<()> {
        let model = lock(&self.model);
        let mut tensors: Vec<(String, Tensor)> = model.state_dict().into_iter().collect();
        tensors.extend(
            self.ema
                .state()
                .iter()
                .map(|(k, t)| (format!("{EMA_PREFIX}{k}"), t.clone())),
        );
        if with_grads {
            for (name, p) in model.named_parameters() {
                if let Some(g) = p.grad() {
                    tensors.push((format!("{GRAD_PREFIX}{name}"), g));
                }
            }
        }
        let mut groups = Vec::new();
        for (i, opt) in self.optimizer.groups().into_iter().enumerate() {
            let state = opt.state_dict()?;
            tensors.extend(
                state
                    .tensors
                    .iter()
                    .map(|(k, t)| (format!("{OPTIMIZER_PREFIX}{i}.{k}"), t.clone())),
            );
            groups.push(GroupHeader {
                kind: state.kind,
                scalars: state.scalars,
            });
        }
        let header = TrainHeader {
            version: VERSION,
            epoch,
            last_step,
            best_fitness: self.best_fitness,
            optimizer: match self.choice.kind {
                OptimizerKind::Sgd => "sgd".into(),
                OptimizerKind::AdamW => "adamw".into(),
            },
            lr0: self.choice.lr0,
            momentum: self.choice.momentum,
            warmup_bias_lr: self.choice.warmup_bias_lr,
            groups,
            ema_updates: self.ema.updates,
            time: self.time_before,
            history: self.history.clone(),
            settings: self.settings.clone(),
        };
        let json = serde_json::to_string(&header)
            .map_err(|e| Error::invalid("yolo checkpoint", format!("header: {e}")))?;
        let mut metadata = model_metadata(&model)?;
        metadata.insert(META_TRAIN.to_string(), json);
        let path = self.checkpoint_path(which);
        ensure_dir(&path)?;
        safetensors::save(&path, &tensors, Some(metadata))
    }

    /// `<which>.pt`: the EMA as ultralytics saves it.
    fn save_pt(&self, which: &str, metrics: &[(String, f64)]) -> Result<()> {
        let columns: Vec<(String, Vec<f64>)> = DETECT_COLUMNS
            .iter()
            .enumerate()
            .map(|(c, name)| {
                let values = self.history.iter().map(|r| row_values(r)[c]).collect();
                (name.to_string(), values)
            })
            .collect();
        let meta = PtMeta {
            epoch: self.epoch as i64 - 1,
            best_fitness: self.best_fitness,
            train_args: self.settings.train_args(),
            train_metrics: metrics.to_vec(),
            train_results: columns,
            ..PtMeta::default()
        };
        let path = self.settings.save_dir.join(format!("{which}.pt"));
        ensure_dir(&path)?;
        self.ema_model()?.save_ultralytics_pt(&path, &meta)
    }
}

/// A row's values in `DETECT_COLUMNS` order (epoch from 1).
fn row_values(r: &EpochRow) -> Vec<f64> {
    [(r.epoch + 1) as f64, r.time]
        .into_iter()
        .chain(r.train_losses)
        .chain(r.metrics)
        .chain(r.val_losses)
        .chain(r.lrs)
        .collect()
}

fn read_header(path: &Path, metadata: &HashMap<String, String>) -> Result<TrainHeader> {
    let text = metadata.get(META_TRAIN).ok_or_else(|| {
        bad(
            path,
            format!(
                "no `{META_TRAIN}` header: not a YOLO training checkpoint (weights alone load \
                 with yolo::load)"
            ),
        )
    })?;
    let header: TrainHeader =
        serde_json::from_str(text).map_err(|e| bad(path, format!("header: {e}")))?;
    if header.version > VERSION {
        return Err(bad(
            path,
            format!(
                "written by a newer version ({} > {VERSION})",
                header.version
            ),
        ));
    }
    Ok(header)
}

fn ensure_dir(path: &Path) -> Result<()> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e)),
        None => Ok(()),
    }
}
