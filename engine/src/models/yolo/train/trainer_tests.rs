//! `YoloTrainer` end to end on a tiny generated shapes dataset and a 1/16-width YOLO11, on
//! the CPU. (Ctrl-C is tested through `brain` in repl/tests, since the cancel flag is
//! process-wide.)

use super::*;
use crate::data::yolo::{generate_shapes, ShapesOptions};
use crate::models::yolo::definitions::BUILTIN;
use crate::models::yolo::{YoloConfig, YoloModel};
use crate::nn::Module;
use crate::{Device, Error, Generator, Tensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// 8 training and 4 validation images of 64 pixels under `dir`.
fn shapes(dir: &Path) -> PathBuf {
    generate_shapes(
        dir.join("shapes"),
        &ShapesOptions {
            train: 8,
            val: 4,
            imgsz: 64,
            ..ShapesOptions::default()
        },
    )
    .unwrap()
}

/// YOLO11 at width 1/16 (8 to 64 channels) with the dataset's 6 classes.
fn tiny_model() -> Arc<Mutex<YoloModel>> {
    let (_, text) = BUILTIN.iter().find(|(f, _)| *f == "yolo11.yaml").unwrap();
    let text = text.replace("n: [0.50, 0.25, 1024]", "n: [0.50, 0.0625, 1024]");
    let cfg = YoloConfig::from_yaml_str(&text, "tiny.yaml", Some("n"), Some(6)).unwrap();
    let names = (0..6).map(|i| format!("c{i}")).collect();
    let model = YoloModel::build(&cfg, names, false, &mut Generator::new(1)).unwrap();
    Arc::new(Mutex::new(model))
}

fn settings(data: PathBuf, save_dir: PathBuf, epochs: usize) -> TrainSettings {
    TrainSettings {
        data,
        epochs,
        batch: 4,
        imgsz: 64,
        close_mosaic: 1,
        workers: 2,
        save_dir,
        ..TrainSettings::default()
    }
}

fn snapshot(state: &BTreeMap<String, Tensor>) -> BTreeMap<String, Vec<f64>> {
    state
        .iter()
        .map(|(k, t)| {
            (
                k.clone(),
                t.to_dtype(crate::DType::F64).unwrap().to_vec().unwrap(),
            )
        })
        .collect()
}

/// The names whose values differ.
fn differing<'a>(
    a: &'a BTreeMap<String, Vec<f64>>,
    b: &BTreeMap<String, Vec<f64>>,
) -> Vec<&'a str> {
    assert_eq!(a.len(), b.len());
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(v))
        .map(|(k, _)| k.as_str())
        .collect()
}

fn model_state(t: &YoloTrainer) -> BTreeMap<String, Vec<f64>> {
    snapshot(&t.model().lock().unwrap().state_dict())
}

#[test]
fn an_epoch_trains_validates_and_writes_results_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let data = shapes(dir.path());
    let run = dir.path().join("run");
    let mut t =
        YoloTrainer::new(tiny_model(), settings(data, run.clone(), 2), Device::Cpu).unwrap();
    let before = model_state(&t);
    let mut seen = Vec::new();
    let r = t.epoch(&mut |p| seen.push(*p)).unwrap();
    // 8 images in batches of 4; the progress reports each batch with its running mean.
    assert_eq!(seen.len(), 2);
    assert_eq!((seen[1].batch, seen[1].batches, seen[1].epochs), (2, 2, 2));
    assert_eq!(seen[1].losses, r.losses);
    assert!(r.losses.iter().all(|l| l.is_finite() && *l > 0.0), "{r:?}");
    assert_eq!((r.epoch, r.images, r.skipped), (0, 8, 0));
    assert!(r.instances > 0);
    // Warmup takes min(3, epochs - 1) epochs = 2 iterations; accumulate ramps from 1, so the
    // first iteration steps.
    assert!(r.optimizer_steps >= 1);
    assert_ne!(model_state(&t), before, "the weights did not change");
    assert!(t.ema().updates >= 1);
    assert!((0.0..=1.0).contains(&r.validation.map));
    let val = r.validation.losses;
    assert!(val.iter().all(|l| l.is_finite() && *l > 0.0), "{val:?}");
    assert!(r.is_best && t.best_fitness() == Some(r.validation.fitness));
    for file in ["last.safetensors", "best.safetensors", "last.pt", "best.pt"] {
        assert!(run.join(file).exists(), "{file} missing");
    }
    let csv = std::fs::read_to_string(run.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 2, "{csv}");
    let row: Vec<f64> = csv
        .lines()
        .nth(1)
        .unwrap()
        .split(',')
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(row[0], 1.0);
    // val/box_loss, val/cls_loss, val/dfl_loss.
    for (written, loss) in row[9..12].iter().zip(val) {
        assert!((written - loss).abs() < 1e-5, "{row:?} {val:?}");
    }
    // The checkpoint loads as a model (the EMA's weights, as ultralytics takes them).
    let ema = YoloModel::load(&run.join("last.safetensors")).unwrap();
    assert_eq!(snapshot(&ema.state_dict()), snapshot(t.ema().state()));
    t.epoch(&mut |_| {}).unwrap();
    assert!(t.is_finished());
    assert!(t.epoch(&mut |_| {}).is_err());
}

#[test]
fn the_host_phases_account_for_the_training_time() {
    let dir = tempfile::tempdir().unwrap();
    let data = shapes(dir.path());
    let mut t = YoloTrainer::new(
        tiny_model(),
        settings(data, dir.path().join("run"), 1),
        Device::Cpu,
    )
    .unwrap();
    let r = t.epoch(&mut |_| {}).unwrap();
    let total: f64 = r.phase_seconds.iter().sum();
    // The phases cover the batches from the first wait for the loader to its end; only
    // starting the loader lies outside them.
    assert!(
        total <= r.train_seconds && total >= 0.5 * r.train_seconds,
        "{:?} of {}",
        r.phase_seconds,
        r.train_seconds
    );
    for phase in ["forward", "backward", "optimizer"] {
        let i = PHASES.iter().position(|p| *p == phase).unwrap();
        assert!(r.phase_seconds[i] > 0.0, "{phase}: {:?}", r.phase_seconds);
    }
}

#[test]
fn resume_continues_at_the_next_epoch_as_an_uninterrupted_run() {
    // auto picks AdamW for a run this short.
    resume_matches_an_uninterrupted_run("auto");
}

#[test]
fn resume_restores_sgd_momentum_as_well() {
    resume_matches_an_uninterrupted_run("SGD");
}

fn resume_matches_an_uninterrupted_run(optimizer: &str) {
    let dir = tempfile::tempdir().unwrap();
    let data = shapes(dir.path());
    let run = dir.path().join("run");
    // nbs 12 with batch 4: accumulate ramps to 3 over the 4 warmup iterations, so steps fall
    // at iterations 0, 2 and 5: epoch 1 ends with a gradient pending into epoch 2.
    let s = TrainSettings {
        nbs: 12,
        optimizer: optimizer.into(),
        ..settings(data, run.clone(), 3)
    };
    let mut whole = YoloTrainer::new(tiny_model(), s, Device::Cpu).unwrap();
    whole.epoch(&mut |_| {}).unwrap();
    whole.epoch(&mut |_| {}).unwrap();
    let after_two = dir.path().join("after_two.safetensors");
    std::fs::copy(run.join("last.safetensors"), &after_two).unwrap();
    let r = whole.epoch(&mut |_| {}).unwrap();
    assert_eq!(r.optimizer_steps, 1);

    // `whole`'s third epoch trains on batches loaded ahead during the second's validation;
    // the resumed run loads its own: the two must be the same batches.
    let mut resumed = YoloTrainer::resume(&after_two, Device::Cpu).unwrap();
    assert_eq!(resumed.next_epoch(), 2);
    assert_eq!(resumed.history().len(), 2);
    let r = resumed.epoch(&mut |_| {}).unwrap();
    assert_eq!(r.epoch, 2);
    assert_eq!(
        differing(&model_state(&resumed), &model_state(&whole)),
        [""; 0]
    );
    let ema = |t: &YoloTrainer| snapshot(t.ema().state());
    assert_eq!(differing(&ema(&resumed), &ema(&whole)), [""; 0]);
    assert_eq!(resumed.ema().updates, whole.ema().updates);
    assert_eq!(
        resumed.history()[2].train_losses,
        whole.history()[2].train_losses
    );
}

#[test]
fn a_checkpoint_of_another_model_or_no_checkpoint_at_all_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = shapes(dir.path());
    let weights = dir.path().join("weights.safetensors");
    tiny_model()
        .lock()
        .unwrap()
        .save_safetensors(&weights)
        .unwrap();
    let err = YoloTrainer::resume(&weights, Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("not a YOLO training checkpoint"), "{err}");
    let garbage = dir.path().join("garbage.safetensors");
    std::fs::write(&garbage, b"\x08\0\0\0\0\0\0\0{}garbage").unwrap();
    assert!(YoloTrainer::resume(&garbage, Device::Cpu).is_err());

    // A checkpoint of the tiny model does not load into a YOLO11n run.
    let run = dir.path().join("run");
    let mut t = YoloTrainer::new(
        tiny_model(),
        settings(data.clone(), run.clone(), 1),
        Device::Cpu,
    )
    .unwrap();
    t.epoch(&mut |_| {}).unwrap();
    let yaml = Path::new("yolo11n.yaml");
    let mut other = YoloTrainer::from_yaml(
        yaml,
        settings(data, dir.path().join("other"), 1),
        Device::Cpu,
    )
    .unwrap();
    let err = other
        .load_checkpoint(&run.join("last.safetensors"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("does not fit") && err.contains("mis-shaped"),
        "{err}"
    );
}

#[test]
fn a_dataset_without_any_labels_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = shapes(dir.path());
    let labels = dir.path().join("shapes/labels/train");
    for e in std::fs::read_dir(&labels).unwrap() {
        std::fs::write(e.unwrap().path(), "").unwrap();
    }
    let err = YoloTrainer::new(
        tiny_model(),
        settings(data, dir.path().join("run"), 1),
        Device::Cpu,
    )
    .err()
    .unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains("no labels found") && msg.contains("data.yaml"),
        "{msg}"
    );
    assert!(!matches!(err, Error::Cancelled));
}

#[test]
fn a_model_with_other_classes_than_the_dataset_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = shapes(dir.path());
    let cfg = YoloConfig::from_file(Path::new("yolo11n.yaml"), Some(3)).unwrap();
    let m = YoloModel::build(&cfg, vec![], false, &mut Generator::new(0)).unwrap();
    let err = YoloTrainer::new(
        Arc::new(Mutex::new(m)),
        settings(data, dir.path().join("run"), 1),
        Device::Cpu,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("3 classes") && err.contains("names 6"),
        "{err}"
    );
}

#[test]
fn a_non_finite_loss_skips_its_optimizer_step_and_keeps_the_weights() {
    let dir = tempfile::tempdir().unwrap();
    let data = shapes(dir.path());
    let model = tiny_model();
    // A NaN class bias makes every batch's cls loss NaN.
    let bias = {
        let m = model.lock().unwrap();
        let (_, b) = m
            .named_parameters()
            .into_iter()
            .find(|(n, _)| n.ends_with("cv3.0.2.bias"))
            .unwrap();
        let nan = Tensor::full(f64::NAN, b.shape(), b.dtype(), Device::Cpu).unwrap();
        crate::no_grad(|| b.copy_(&nan)).unwrap();
        b
    };
    let mut t = YoloTrainer::new(
        model,
        settings(data, dir.path().join("run"), 2),
        Device::Cpu,
    )
    .unwrap();
    // The parameters (the batch norms' running statistics still move, as in ultralytics).
    let params = |t: &YoloTrainer| {
        let m = t.model().lock().unwrap();
        snapshot(&m.named_parameters().into_iter().collect())
    };
    let before = params(&t);
    let r = t.epoch(&mut |_| {}).unwrap();
    // Two batches; warmup steps after the first (accumulate 1), and that step is skipped.
    // The second batch's gradients wait for the next epoch's step.
    assert_eq!((r.optimizer_steps, r.skipped), (0, 1), "{r:?}");
    assert!(r.losses.iter().all(|&l| l == 0.0), "{r:?}");
    for (name, values) in params(&t) {
        let old = &before[&name];
        let same = values
            .iter()
            .zip(old)
            .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()));
        assert!(same, "{name} changed");
    }
    let g = bias.grad().expect("the second batch's gradient");
    assert!(g.to_vec_f64().unwrap().iter().any(|v| !v.is_finite()));
}
