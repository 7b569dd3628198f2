//! `yolo::trainer(...)`: an ultralytics-style training run as a Rhai value, driven an epoch at
//! a time with a progress bar per epoch. The engine's `YoloTrainer` does all the work; this
//! converts options and results.

use super::model::Yolo;
use crate::error::{guard, runtime_error, RhaiResult};
use crate::progress::Progress;
use rhai::{Array, Dynamic, Map, INT};
use rusting_brain::models::yolo::train::{EpochReport, TrainSettings, YoloTrainer};
use rusting_brain::models::yolo::YoloModel;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Clone)]
pub struct YoloTrain(Arc<Mutex<YoloTrainer>>);

impl YoloTrain {
    fn new(t: YoloTrainer) -> Self {
        YoloTrain(Arc::new(Mutex::new(t)))
    }

    fn lock(&self) -> MutexGuard<'_, YoloTrainer> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

crate::options! {
    /// yolo::trainer's settings; `data` is required, the rest default to TrainSettings'.
    struct TrainerOptions {
        data: String,
        epochs: usize = TrainSettings::default().epochs,
        batch: usize = TrainSettings::default().batch,
        imgsz: usize = TrainSettings::default().imgsz,
        optimizer: String = TrainSettings::default().optimizer,
        lr0: f64 = TrainSettings::default().lr0,
        lrf: f64 = TrainSettings::default().lrf,
        momentum: f64 = TrainSettings::default().momentum,
        weight_decay: f64 = TrainSettings::default().weight_decay,
        warmup_epochs: f64 = TrainSettings::default().warmup_epochs,
        warmup_momentum: f64 = TrainSettings::default().warmup_momentum,
        warmup_bias_lr: f64 = TrainSettings::default().warmup_bias_lr,
        close_mosaic: usize = TrainSettings::default().close_mosaic,
        nbs: usize = TrainSettings::default().nbs,
        seed: INT = TrainSettings::default().seed as INT,
        workers: usize = TrainSettings::default().workers,
        amp: bool = TrainSettings::default().amp,
        mosaic: f64 = TrainSettings::default().mosaic,
        save_dir: String,
    }
}

fn settings(opts: Map) -> RhaiResult<TrainSettings> {
    let o = TrainerOptions::parse("yolo::trainer", opts)?;
    let d = TrainSettings::default();
    let data = o.data.ok_or_else(|| {
        runtime_error("yolo::trainer: `data` (the dataset's data.yaml) is required")
    })?;
    Ok(TrainSettings {
        data: PathBuf::from(data),
        epochs: o.epochs,
        batch: o.batch,
        imgsz: o.imgsz,
        optimizer: o.optimizer,
        lr0: o.lr0,
        lrf: o.lrf,
        momentum: o.momentum,
        weight_decay: o.weight_decay,
        warmup_epochs: o.warmup_epochs,
        warmup_momentum: o.warmup_momentum,
        warmup_bias_lr: o.warmup_bias_lr,
        close_mosaic: o.close_mosaic,
        nbs: o.nbs,
        seed: o.seed as u64,
        workers: o.workers,
        amp: o.amp,
        mosaic: o.mosaic,
        save_dir: o.save_dir.map(PathBuf::from).unwrap_or(d.save_dir),
    })
}

/// `yolo::trainer(model, opts)`: trains the given detector in place.
pub fn with_model(model: &mut Yolo, opts: Map) -> RhaiResult<YoloTrain> {
    let s = settings(opts)?;
    let device = crate::tensor::default_device();
    guard(|| YoloTrainer::new(model.shared(), s, device)).map(YoloTrain::new)
}

/// `yolo::trainer("yolo11n.yaml" | "best.pt", opts)`: a fresh model from a YAML with the
/// dataset's classes, or weights to fine-tune.
pub fn with_path(path: &str, opts: Map) -> RhaiResult<YoloTrain> {
    let s = settings(opts)?;
    let device = crate::tensor::default_device();
    let p = Path::new(path);
    let is_yaml = matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
    guard(|| {
        if is_yaml {
            YoloTrainer::from_yaml(p, s, device)
        } else {
            let model = YoloModel::load(p)?;
            YoloTrainer::new(Arc::new(Mutex::new(model)), s, device)
        }
    })
    .map(YoloTrain::new)
}

/// `yolo::resume(path)`: the run of a `last.safetensors`, at its next epoch.
pub fn resume(path: &str) -> RhaiResult<YoloTrain> {
    let device = crate::tensor::default_device();
    guard(|| YoloTrainer::resume(Path::new(path), device)).map(YoloTrain::new)
}

/// `t.resume(path)`: this run's state from a checkpoint of it.
pub fn load_checkpoint(t: &mut YoloTrain, path: &str) -> RhaiResult<()> {
    guard(|| t.lock().load_checkpoint(Path::new(path)))
}

/// `t.epoch()`: one epoch with a progress bar of box/cls/dfl losses, instances and size.
pub fn epoch(t: &mut YoloTrain) -> RhaiResult<Map> {
    let mut trainer = t.lock();
    let (epoch, epochs) = (trainer.next_epoch(), trainer.settings().epochs);
    let mut bar: Option<Progress> = None;
    let label = format!("epoch {}/{epochs}", epoch + 1);
    let result = guard(|| {
        trainer.epoch(&mut |p| {
            let bar = bar.get_or_insert_with(|| Progress::new(p.batches as u64, &label));
            bar.set_message(&format!(
                "box {:.4} cls {:.4} dfl {:.4} instances {} size {}",
                p.losses[0], p.losses[1], p.losses[2], p.instances, p.imgsz
            ));
            bar.inc(1);
        })
    });
    if let Some(bar) = &bar {
        bar.finish();
    }
    result.map(|r| report_map(&r))
}

fn floats(values: impl IntoIterator<Item = f64>) -> Dynamic {
    values
        .into_iter()
        .map(Dynamic::from_float)
        .collect::<Array>()
        .into()
}

fn report_map(r: &EpochReport) -> Map {
    let v = &r.validation;
    let mut m = Map::new();
    m.insert("epoch".into(), Dynamic::from_int(r.epoch as INT + 1));
    m.insert("epochs".into(), Dynamic::from_int(r.epochs as INT));
    for (key, value) in [
        ("box", r.losses[0]),
        ("cls", r.losses[1]),
        ("dfl", r.losses[2]),
        ("precision", v.precision),
        ("recall", v.recall),
        ("map50", v.map50),
        ("map", v.map),
        ("fitness", v.fitness),
        ("val_box", v.losses[0]),
        ("val_cls", v.losses[1]),
        ("val_dfl", v.losses[2]),
        ("time", r.time),
    ] {
        m.insert(key.into(), Dynamic::from_float(value));
    }
    m.insert("instances".into(), Dynamic::from_int(r.instances as INT));
    m.insert("images".into(), Dynamic::from_int(r.images as INT));
    m.insert("train_seconds".into(), Dynamic::from_float(r.train_seconds));
    let phases: Map = rusting_brain::models::yolo::train::PHASES
        .iter()
        .zip(r.phase_seconds)
        .map(|(name, secs)| ((*name).into(), Dynamic::from_float(secs)))
        .collect();
    m.insert("phase_seconds".into(), phases.into());
    let rate = r.images as f64 / r.train_seconds.max(1e-9);
    m.insert("images_per_second".into(), Dynamic::from_float(rate));
    m.insert("steps".into(), Dynamic::from_int(r.optimizer_steps as INT));
    m.insert("skipped".into(), Dynamic::from_int(r.skipped as INT));
    m.insert("lr".into(), floats(r.lrs));
    m.insert("is_best".into(), Dynamic::from_bool(r.is_best));
    m.insert("table".into(), v.table.clone().into());
    m
}

/// `t.history()`: every finished epoch's results by column, for plots.
pub fn history(t: &mut YoloTrain) -> Map {
    let trainer = t.lock();
    let h = trainer.history();
    let mut m = Map::new();
    let column = |f: &dyn Fn(&rusting_brain::models::yolo::train::results_csv::EpochRow) -> f64| {
        floats(h.iter().map(f))
    };
    m.insert("epoch".into(), column(&|r| (r.epoch + 1) as f64));
    m.insert("box".into(), column(&|r| r.train_losses[0]));
    m.insert("cls".into(), column(&|r| r.train_losses[1]));
    m.insert("dfl".into(), column(&|r| r.train_losses[2]));
    m.insert("precision".into(), column(&|r| r.metrics[0]));
    m.insert("recall".into(), column(&|r| r.metrics[1]));
    m.insert("map50".into(), column(&|r| r.metrics[2]));
    m.insert("map".into(), column(&|r| r.metrics[3]));
    m.insert("val_box".into(), column(&|r| r.val_losses[0]));
    m.insert("val_cls".into(), column(&|r| r.val_losses[1]));
    m.insert("val_dfl".into(), column(&|r| r.val_losses[2]));
    m
}

/// `yolo::results(path)`: a results.csv by column.
pub fn results(path: &str) -> RhaiResult<Map> {
    use rusting_brain::models::yolo::train::results_csv::read_columns;
    let columns = guard(|| read_columns(Path::new(path)))?;
    Ok(columns
        .into_iter()
        .map(|(name, values)| (name.into(), floats(values)))
        .collect())
}

pub fn is_finished(t: &mut YoloTrain) -> bool {
    t.lock().is_finished()
}

/// The next epoch, from 1 as printed.
pub fn next_epoch(t: &mut YoloTrain) -> INT {
    t.lock().next_epoch() as INT + 1
}

pub fn epochs(t: &mut YoloTrain) -> INT {
    t.lock().settings().epochs as INT
}

pub fn save_dir(t: &mut YoloTrain) -> String {
    t.lock().settings().save_dir.display().to_string()
}

/// The run's settings that a script reuses (a resumed run's come from its checkpoint).
pub fn settings_map(t: &mut YoloTrain) -> Map {
    let trainer = t.lock();
    let s = trainer.settings();
    let mut m = Map::new();
    m.insert("data".into(), s.data.display().to_string().into());
    m.insert("save_dir".into(), s.save_dir.display().to_string().into());
    m.insert("optimizer".into(), s.optimizer.clone().into());
    for (key, v) in [
        ("epochs", s.epochs),
        ("batch", s.batch),
        ("imgsz", s.imgsz),
        ("close_mosaic", s.close_mosaic),
        ("workers", s.workers),
    ] {
        m.insert(key.into(), Dynamic::from_int(v as INT));
    }
    m.insert("seed".into(), Dynamic::from_int(s.seed as INT));
    m.insert("amp".into(), Dynamic::from_bool(s.amp));
    m.insert("lr0".into(), Dynamic::from_float(s.lr0));
    m
}

/// The model being trained (shared: it changes as training goes on).
pub fn model(t: &mut YoloTrain) -> Yolo {
    Yolo::from_shared(t.lock().model().clone())
}

/// A copy of the EMA weights as a detector (what is validated and saved).
pub fn ema_model(t: &mut YoloTrain) -> RhaiResult<Yolo> {
    let m = guard(|| t.lock().ema_model())?;
    Yolo::new(m)
}
