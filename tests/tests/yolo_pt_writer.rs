//! Ultralytics checkpoints written by `YoloModel::save_ultralytics_pt`: read back by our own
//! `.pt` loader (weights bit-equal after the FP16 cast), and loaded, run and validated by
//! ultralytics 8.4.190 itself through `tests/fixtures/yolo/pt_writer/check_with_ultralytics.py`.
//! The Python is found by `rb_integration_tests::ultralytics_python` (`RB_ULTRALYTICS_PYTHON`);
//! without one those tests print SKIPPED (and fail when `RB_ULTRALYTICS_PYTHON` names an unusable one).

use rb_integration_tests::ultralytics_python::ultralytics_python;
use rusting_brain::models::yolo::{definitions, PtMeta, YoloConfig, YoloModel};
use rusting_brain::nn::Module;
use rusting_brain::{no_grad, DType, Generator, Tensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// YOLO11 at a scale named `m` (so C3k2 holds C3k blocks) but a quarter of the width: small,
/// and every block type of the family.
fn yolo11_tiny_m(nc: usize) -> YoloConfig {
    let (_, text) = definitions::BUILTIN[0];
    let text = text.replace("m: [0.50, 1.00, 512]", "m: [0.50, 0.25, 512]");
    YoloConfig::from_yaml_str(&text, "yolo11-tiny-m", Some("m"), Some(nc)).unwrap()
}

fn builtin(name: &str, nc: usize) -> YoloConfig {
    definitions::builtin(name, Some(nc)).unwrap().unwrap()
}

fn names(nc: usize) -> Vec<String> {
    (0..nc).map(|i| format!("thing {i}")).collect()
}

/// A network whose every tensor is random: weights, batch-norm statistics, batch counts.
fn randomised(config: &YoloConfig, seed: u64) -> YoloModel {
    let nc = config.nc;
    let model = YoloModel::build(config, names(nc), false, &mut Generator::new(seed)).unwrap();
    let mut gen = Generator::new(seed + 1);
    let state: BTreeMap<String, Tensor> = model
        .state_dict()
        .into_iter()
        .map(|(k, t)| {
            let t = match t.dtype() {
                DType::I64 => Tensor::from_vec(vec![seed as i64 + 7], &[]).unwrap(),
                _ => Tensor::randn(t.dims(), DType::F32, Some(&mut gen))
                    .unwrap()
                    .abs()
                    .unwrap(),
            };
            (k, t)
        })
        .collect();
    model.load_weights(&state, "random").unwrap();
    model
}

/// The values of a state dict as F32 bit patterns, F16-rounded first when asked.
fn bits(state: &BTreeMap<String, Tensor>, via_f16: bool) -> BTreeMap<String, Vec<u64>> {
    state
        .iter()
        .map(|(k, t)| {
            let v: Vec<u64> = match t.dtype() {
                DType::I64 => t
                    .to_vec::<i64>()
                    .unwrap()
                    .iter()
                    .map(|&i| i as u64)
                    .collect(),
                _ => {
                    let t = if via_f16 {
                        t.to_dtype(DType::F16).unwrap()
                    } else {
                        t.clone()
                    };
                    let v = t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
                    v.iter().map(|x| x.to_bits() as u64).collect()
                }
            };
            (k.clone(), v)
        })
        .collect()
}

fn round_trip(config: &YoloConfig, what: &str) {
    let model = randomised(config, 3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("best.pt");
    model
        .save_ultralytics_pt(&path, &PtMeta::default())
        .unwrap();
    let loaded = YoloModel::load_pt(&path).unwrap();
    assert_eq!(loaded.names, model.names, "{what}");
    assert_eq!(loaded.config.layers, model.config.layers, "{what}");
    assert_eq!(loaded.nc(), model.nc(), "{what}");
    assert_eq!(loaded.strides(), model.strides(), "{what}");
    assert!(!loaded.fused, "{what}");
    let (want, got) = (
        bits(&model.state_dict(), true),
        bits(&loaded.state_dict(), false),
    );
    assert_eq!(
        want.keys().collect::<Vec<_>>(),
        got.keys().collect::<Vec<_>>()
    );
    for (k, w) in &want {
        assert!(got[k] == *w, "{what}: `{k}` differs after the round trip");
    }
}

#[test]
fn yolo11_checkpoint_round_trips_through_our_loader_bit_equal_after_the_half_cast() {
    round_trip(&yolo11_tiny_m(3), "yolo11 (C3k)");
    round_trip(&builtin("yolo11n.yaml", 2), "yolo11n");
}

#[test]
fn yolov8_checkpoint_round_trips_through_our_loader_bit_equal_after_the_half_cast() {
    round_trip(&builtin("yolov8n.yaml", 5), "yolov8n");
}

#[test]
fn checkpoint_records_the_training_metadata() {
    let model = randomised(&builtin("yolov8n.yaml", 2), 1);
    let mut meta = PtMeta {
        epoch: 41,
        best_fitness: Some(0.625),
        date: Some("2025-06-01T10:00:00+00:00".into()),
        train_metrics: vec![("metrics/mAP50-95(B)".into(), 0.5)],
        train_results: vec![("epoch".into(), vec![1.0, 2.0])],
        ..PtMeta::default()
    };
    meta.train_args.insert("imgsz".into(), 320.into());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("last.pt");
    model.save_ultralytics_pt(&path, &meta).unwrap();
    let ckpt = rusting_brain::io::torch::load_pt(&path).unwrap();
    let get = |k: &str| ckpt.get(k).unwrap_or_else(|| panic!("no `{k}`"));
    assert_eq!(get("epoch").as_i64(), Some(41));
    assert_eq!(get("best_fitness").as_f64(), Some(0.625));
    assert_eq!(get("date").as_str(), Some("2025-06-01T10:00:00+00:00"));
    assert_eq!(get("version").as_str(), Some("8.4.190"));
    assert!(matches!(get("ema"), rusting_brain::io::torch::Value::None));
    let args = get("train_args");
    assert_eq!(args.get("task").and_then(|v| v.as_str()), Some("detect"));
    assert_eq!(args.get("imgsz").and_then(|v| v.as_i64()), Some(320));
    let metric = get("train_metrics").get("metrics/mAP50-95(B)");
    assert_eq!(metric.and_then(|v| v.as_f64()), Some(0.5));
    let model = get("model");
    assert_eq!(
        model.class_name(),
        Some("ultralytics.nn.tasks.DetectionModel")
    );
    assert_eq!(model.get("inplace").and_then(|v| v.as_bool()), Some(true));
    let layer0 = model.get("model").and_then(|m| m.get("0")).unwrap();
    assert_eq!(
        layer0.class_name(),
        Some("ultralytics.nn.modules.conv.Conv")
    );
    let weight = layer0.get("conv").and_then(|c| c.get("weight")).unwrap();
    assert_eq!(weight.as_tensor().unwrap().dtype(), DType::F16);
}

#[test]
fn saving_the_same_network_twice_gives_the_same_bytes() {
    let model = randomised(&builtin("yolov8n.yaml", 2), 1);
    let meta = PtMeta {
        date: Some("2025-06-01T10:00:00+00:00".into()),
        ..PtMeta::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.pt"), dir.path().join("b.pt"));
    model.save_ultralytics_pt(&a, &meta).unwrap();
    model.save_ultralytics_pt(&b, &meta).unwrap();
    assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap());
}

#[test]
fn an_unwritable_path_is_named_in_the_error() {
    let model = randomised(&builtin("yolov8n.yaml", 2), 1);
    let dir = tempfile::tempdir().unwrap();
    // A folder cannot be made under a file.
    let file = dir.path().join("plain.txt");
    std::fs::write(&file, "x").unwrap();
    let path = file.join("best.pt");
    let e = model
        .save_ultralytics_pt(&path, &PtMeta::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains(&file.display().to_string()), "{e}");
    // A folder where the file should go.
    let e = model
        .save_ultralytics_pt(dir.path(), &PtMeta::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains(&dir.path().display().to_string()), "{e}");
}

#[test]
fn fused_networks_are_refused_with_a_reason() {
    let model = randomised(&builtin("yolov8n.yaml", 2), 1);
    let fused = model.fuse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let e = fused
        .save_ultralytics_pt(&dir.path().join("f.pt"), &PtMeta::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("fused"), "{e}");
}

// ----- ultralytics itself -----

fn write_f32(path: &Path, t: &Tensor) {
    let bytes: Vec<u8> = t
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(path, bytes).unwrap();
}

/// A network with PyTorch's initial weights and non-trivial batch-norm statistics, so its
/// outputs stay in a sane range and every batch norm matters.
fn plausible(config: &YoloConfig) -> YoloModel {
    let mut model =
        YoloModel::build(config, names(config.nc), false, &mut Generator::new(5)).unwrap();
    let mut gen = Generator::new(6);
    let state: BTreeMap<String, Tensor> = model
        .state_dict()
        .into_iter()
        .map(|(k, t)| {
            let mut noise = || {
                Tensor::rand(t.dims(), DType::F32, Some(&mut gen))
                    .unwrap()
                    .sub_scalar(0.5)
                    .unwrap()
            };
            let t = if k.ends_with("running_var") || k.ends_with("bn.weight") {
                noise().add_scalar(1.0).unwrap()
            } else if k.ends_with("running_mean") || k.ends_with("bn.bias") {
                noise().mul_scalar(0.2).unwrap()
            } else {
                t
            };
            (k, t)
        })
        .collect();
    model.load_weights(&state, "plausible").unwrap();
    model.eval();
    model
}

/// Saves `config`'s network, runs our loaded-back copy on a fixed input, and has ultralytics
/// check the file; returns its summary.
fn check_with_ultralytics(
    py: &str,
    config: &YoloConfig,
    imgsz: usize,
    val: bool,
) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let pt = dir.path().join("best.pt");
    let mut meta = PtMeta::default();
    meta.train_args.insert("imgsz".into(), imgsz.into());
    plausible(config).save_ultralytics_pt(&pt, &meta).unwrap();
    // The weights as saved (FP16), in F32, as ultralytics runs them after `.float()`.
    let ours = YoloModel::load_pt(&pt).unwrap();
    let x = Tensor::rand(
        &[2, 3, imgsz, imgsz],
        DType::F32,
        Some(&mut Generator::new(9)),
    )
    .unwrap();
    let y = no_grad(|| ours.forward(&x)).unwrap();
    let (input, output, summary) = (
        dir.path().join("input.f32"),
        dir.path().join("ours.f32"),
        dir.path().join("summary.json"),
    );
    write_f32(&input, &x);
    write_f32(&output, &y);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/yolo/pt_writer/check_with_ultralytics.py");
    let mut cmd = Command::new(py);
    cmd.arg(script)
        .arg(&pt)
        .arg(&input)
        .arg(format!("2,3,{imgsz},{imgsz}"))
        .arg(&output)
        .arg(&summary);
    if val {
        cmd.arg("--val");
    }
    let out = cmd.output().unwrap();
    let text = std::fs::read_to_string(&summary).unwrap_or_default();
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "check_with_ultralytics.py failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&text).unwrap()
}

#[test]
fn ultralytics_loads_runs_and_validates_a_saved_yolo11() {
    let test = "ultralytics_loads_runs_and_validates_a_saved_yolo11";
    let Some(py) = ultralytics_python(test) else {
        return;
    };
    let s = check_with_ultralytics(&py, &yolo11_tiny_m(3), 64, true);
    assert_eq!(s["class"], "DetectionModel");
    assert_eq!(s["structure_diffs"].as_array().map(Vec::len), Some(0));
    assert_eq!(s["predict_images"], 2);
    assert_eq!(s["mmap_load"], true);
    assert!(s["val_map50_95"].as_f64().is_some());
}

#[test]
fn ultralytics_loads_and_runs_a_saved_yolo11n() {
    let test = "ultralytics_loads_and_runs_a_saved_yolo11n";
    let Some(py) = ultralytics_python(test) else {
        return;
    };
    let s = check_with_ultralytics(&py, &builtin("yolo11n.yaml", 80), 96, false);
    assert_eq!(s["structure_diffs"].as_array().map(Vec::len), Some(0));
    assert_eq!(s["output_shape"], serde_json::json!([2, 84, 189]));
}

#[test]
fn ultralytics_loads_and_runs_a_saved_yolov8() {
    let test = "ultralytics_loads_and_runs_a_saved_yolov8";
    let Some(py) = ultralytics_python(test) else {
        return;
    };
    let s = check_with_ultralytics(&py, &builtin("yolov8n.yaml", 4), 64, false);
    assert_eq!(s["class"], "DetectionModel");
    assert_eq!(s["structure_diffs"].as_array().map(Vec::len), Some(0));
    assert_eq!(s["predict_images"], 2);
}
