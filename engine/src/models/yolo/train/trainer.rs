//! `YoloTrainer`: ultralytics 8.4.190's detection training loop (`BaseTrainer._do_train`) put
//! together from the parts beside it: the augmented loader, the loss, the three parameter
//! groups and their optimizer, the warmup and decay schedule, the EMA, validation, results.csv
//! and checkpoints. A run is driven one epoch at a time (`epoch`), so a script can print, plot
//! or stop between epochs; each batch is reported through a callback for progress bars.
//!
//! The loop of one epoch is in `epoch.rs`, the checkpoints in `checkpoint.rs`.

use super::optimizer_choice::{choose_optimizer, ChoiceInputs, GroupOptimizers, OptimizerChoice};
use super::param_groups::{scaled_weight_decay, ParamGroups};
use super::results_csv::EpochRow;
use super::schedule::{accumulate_for, ScheduleConfig, TrainSchedule};
use super::settings::TrainSettings;
use crate::data::background::Background;
use crate::data::yolo::{DataConfig, TrainBatch, TrainLoader, TrainLoaderOptions, YoloDataset};
use crate::messages;
use crate::models::yolo::loss::{DetectionLoss, LossGains};
use crate::models::yolo::{YoloConfig, YoloModel};
use crate::nn::Module;
use crate::optim::ModelEma;
use crate::vision::augment::AugmentConfig;
use crate::{Device, Error, Generator, Result};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Gradient norm clipping of every optimizer step (ultralytics' `optimizer_step`).
pub const MAX_GRAD_NORM: f64 = 10.0;

pub struct YoloTrainer {
    pub(super) model: Arc<Mutex<YoloModel>>,
    pub(super) settings: TrainSettings,
    pub(super) data: DataConfig,
    pub(super) loader: TrainLoader,
    pub(super) loss: DetectionLoss,
    pub(super) optimizer: GroupOptimizers,
    pub(super) choice: OptimizerChoice,
    pub(super) schedule: TrainSchedule,
    pub(super) ema: ModelEma,
    pub(super) device: Device,
    /// The training image side actually used (a multiple of the largest stride).
    pub(super) imgsz: usize,
    /// The next epoch to run, from 0.
    pub(super) epoch: usize,
    /// The global iteration of the last optimizer step (ultralytics' `last_opt_step`; `None`
    /// is its -1).
    pub(super) last_step: Option<usize>,
    pub(super) best_fitness: Option<f64>,
    /// One row per finished epoch (results.csv, the `.pt`'s `train_results`).
    pub(super) history: Vec<EpochRow>,
    /// Training seconds of earlier sessions of this run (a resumed run adds on).
    pub(super) time_before: f64,
    /// The next epoch's batches, started when the previous epoch's training ended so that
    /// its first batches load during validation (ultralytics' persistent workers do the same).
    pub(super) prefetched: Option<PrefetchedEpoch>,
}

/// An epoch's batches being loaded ahead: the epoch (from 0) and its batches.
pub(super) type PrefetchedEpoch = (usize, Background<TrainBatch>);

impl YoloTrainer {
    /// A run of `model` (unfused; it trains in place) on `settings.data`, on `device`. The
    /// model's class count must equal the dataset's; its names become the dataset's.
    pub fn new(
        model: Arc<Mutex<YoloModel>>,
        settings: TrainSettings,
        device: Device,
    ) -> Result<YoloTrainer> {
        crate::dist::refuse_unsynchronized_training("yolo train")?;
        settings.validate()?;
        let data = DataConfig::load(&settings.data)?;
        let dataset = training_set(&data)?;
        let (nc, stride, groups) = {
            let mut m = lock(&model);
            if m.fused {
                return Err(Error::invalid(
                    "yolo train",
                    "a fused model (batch norms folded) cannot train; load or build the unfused one",
                ));
            }
            if m.nc() != data.names.len() {
                return Err(Error::invalid(
                    "yolo train",
                    format!(
                        "the model has {} classes but {} names {}; build the model with the \
                         dataset's classes",
                        m.nc(),
                        data.file.display(),
                        data.names.len()
                    ),
                ));
            }
            m.names = data.names.clone();
            m.to_device(device)?;
            (m.nc(), m.max_stride(), ParamGroups::of_model(&m)?)
        };
        let imgsz = settings.imgsz.div_ceil(stride) * stride;
        let n_images = dataset.images.len();
        let loader = TrainLoader::new(
            Arc::new(dataset),
            TrainLoaderOptions {
                batch_size: settings.batch,
                workers: settings.workers,
                seed: settings.seed,
                epochs: settings.epochs,
                close_mosaic: settings.close_mosaic,
                augment: AugmentConfig {
                    imgsz,
                    mosaic: settings.mosaic,
                    ..AugmentConfig::default()
                },
                ..TrainLoaderOptions::default()
            },
        )?;
        let batch = loader.batch_size();
        let choice = choose_optimizer(&ChoiceInputs {
            optimizer: settings.optimizer.clone(),
            lr0: settings.lr0,
            momentum: settings.momentum,
            warmup_bias_lr: settings.warmup_bias_lr,
            nc,
            dataset_size: n_images,
            batch_size: batch,
            nbs: settings.nbs,
            epochs: settings.epochs,
        })?;
        let schedule = TrainSchedule::new(
            ScheduleConfig {
                lr0: choice.lr0,
                lrf: settings.lrf,
                momentum: choice.momentum,
                warmup_epochs: settings.warmup_epochs,
                warmup_momentum: settings.warmup_momentum,
                warmup_bias_lr: choice.warmup_bias_lr,
                nbs: settings.nbs,
            },
            settings.epochs,
            loader.batches_per_epoch(),
            batch,
        )?;
        // ultralytics scales the decay with the uncapped nominal accumulation.
        let weight_decay = scaled_weight_decay(
            settings.weight_decay,
            batch,
            accumulate_for(settings.nbs, batch),
            settings.nbs,
        );
        let optimizer = GroupOptimizers::new(&choice, groups, weight_decay)?;
        let (loss, ema) = {
            let m = lock(&model);
            (
                DetectionLoss::for_head(m.detect(), LossGains::default())?,
                ModelEma::new(&*m)?,
            )
        };
        messages::info(&format!(
            "optimizer: {:?}(lr={}, momentum={}) with parameter groups {:?} weight(decay=0.0), \
             weight(decay={weight_decay}), bias(decay=0.0)",
            choice.kind,
            choice.lr0,
            choice.momentum,
            optimizer.groups().map(|g| g.core().params().len()),
        ));
        Ok(YoloTrainer {
            model,
            settings,
            data,
            loader,
            loss,
            optimizer,
            choice,
            schedule,
            ema,
            device,
            imgsz,
            epoch: 0,
            last_step: None,
            best_fitness: None,
            history: Vec::new(),
            time_before: 0.0,
            prefetched: None,
        })
    }

    /// A fresh model from a model YAML (`yolo11n.yaml` is built in) with the dataset's
    /// classes, seeded by `settings.seed`, and a run of it.
    pub fn from_yaml(yaml: &Path, settings: TrainSettings, device: Device) -> Result<YoloTrainer> {
        let data = DataConfig::load(&settings.data)?;
        let cfg = YoloConfig::from_file(yaml, Some(data.names.len()))?;
        let model = YoloModel::build(
            &cfg,
            data.names.clone(),
            false,
            &mut Generator::new(settings.seed),
        )?;
        YoloTrainer::new(Arc::new(Mutex::new(model)), settings, device)
    }

    pub fn model(&self) -> &Arc<Mutex<YoloModel>> {
        &self.model
    }

    pub fn settings(&self) -> &TrainSettings {
        &self.settings
    }

    /// The next epoch to run, from 0 (equal to `epochs` when the run is done).
    pub fn next_epoch(&self) -> usize {
        self.epoch
    }

    pub fn is_finished(&self) -> bool {
        self.epoch >= self.settings.epochs
    }

    pub fn best_fitness(&self) -> Option<f64> {
        self.best_fitness
    }

    pub fn optimizer_choice(&self) -> OptimizerChoice {
        self.choice
    }

    pub fn schedule(&self) -> &TrainSchedule {
        &self.schedule
    }

    pub fn ema(&self) -> &ModelEma {
        &self.ema
    }

    /// The finished epochs' rows, as results.csv holds them.
    pub fn history(&self) -> &[EpochRow] {
        &self.history
    }

    pub fn results_csv(&self) -> PathBuf {
        self.settings.save_dir.join("results.csv")
    }

    /// `save_dir/last.safetensors` or `save_dir/best.safetensors` (`which` is `last`/`best`).
    pub fn checkpoint_path(&self, which: &str) -> PathBuf {
        self.settings.save_dir.join(format!("{which}.safetensors"))
    }

    /// A new unfused model holding the EMA's weights, on the training device, in eval mode
    /// (what ultralytics validates and saves).
    pub fn ema_model(&self) -> Result<YoloModel> {
        let m = lock(&self.model);
        let mut copy = YoloModel::build(&m.config, m.names.clone(), false, &mut Generator::new(0))?;
        copy.to_device(self.device)?;
        copy.load_weights(self.ema.state(), "the EMA")?;
        copy.eval();
        Ok(copy)
    }
}

pub(super) fn lock(model: &Mutex<YoloModel>) -> MutexGuard<'_, YoloModel> {
    model.lock().unwrap_or_else(|e| e.into_inner())
}

/// The training split, its warnings passed on; a split whose label files hold no box at all
/// is an error, as ultralytics refuses to train on it.
fn training_set(data: &DataConfig) -> Result<YoloDataset> {
    let dataset = YoloDataset::load(data, "train")?;
    for w in &dataset.warnings {
        messages::warn(w);
    }
    if dataset.images.iter().all(|e| e.labels.is_empty()) {
        let paths: Vec<String> = data.train.iter().map(|p| p.display().to_string()).collect();
        return Err(Error::invalid(
            "yolo train",
            format!(
                "no labels found in the training images of {} ({}): every label file is \
                 missing or empty, so there is nothing to learn",
                data.file.display(),
                paths.join(", ")
            ),
        ));
    }
    Ok(dataset)
}
