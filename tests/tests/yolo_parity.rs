//! Our YOLO against ultralytics' own numbers (fixtures made by
//! `tests/fixtures/yolo/make_yolo_fixtures.py` with torch and ultralytics 8.4.190):
//! - raw head outputs of a model loaded from ultralytics' `best.pt`, on the stored inputs;
//! - the real YOLOv8n ONNX export (nudenet) beside onnxruntime's output;
//! - NMS rows beside ultralytics' `non_max_suppression`;
//! - our val loader's letterboxed batch beside ultralytics' val batch.
//!
//! The small fixtures are committed under `tests/fixtures/yolo/parity`. `RB_YOLO_FIXTURES`
//! points at a fuller set (made on the GPU machine); `RB_YOLO_SHAPES` at the dataset they
//! came from (for the loader check); `RB_YOLO_DEVICE=cuda` runs the models on CUDA.

use rusting_brain::data::npy::read_npy;
use rusting_brain::data::yolo::{DataConfig, ValLoader, ValLoaderOptions, YoloDataset};
use rusting_brain::models::yolo::YoloModel;
use rusting_brain::nn::Module;
use rusting_brain::vision::nms::{non_max_suppression, NmsOptions};
use rusting_brain::{DType, Device, Tensor};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixtures() -> PathBuf {
    match std::env::var_os("RB_YOLO_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/yolo/parity"),
    }
}

fn device() -> Device {
    match std::env::var("RB_YOLO_DEVICE").as_deref() {
        Ok("cuda") => Device::Cuda(0),
        _ => Device::Cpu,
    }
}

/// Subfolders of the fixture folder whose names start with `prefix`.
fn cases(prefix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_dir() && p.file_name().unwrap().to_string_lossy().starts_with(prefix)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    if out.is_empty() {
        eprintln!("SKIPPED: no {prefix}* fixtures in {}", fixtures().display());
    }
    out
}

/// max |a - b| / max |b|.
fn relative_error(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
    let scale = b.iter().fold(0f64, |m, v| m.max(v.abs()));
    let diff = a
        .iter()
        .zip(&b)
        .fold(0f64, |m, (x, y)| m.max((x - y).abs()));
    diff / scale.max(1e-30)
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn images_from_u8(u8_nchw: &Tensor) -> Tensor {
    u8_nchw
        .to(device(), DType::F32)
        .unwrap()
        .div_scalar(255.0)
        .unwrap()
}

/// raw_<model>_<imgsz>: the model from train_<model>/weights/best.pt.
fn weights_for(case: &Path) -> PathBuf {
    let name = case.file_name().unwrap().to_string_lossy().to_string();
    let model = name
        .trim_start_matches("raw_")
        .rsplit_once('_')
        .unwrap()
        .0
        .to_string();
    let committed = fixtures().join(format!("{model}_best.pt"));
    if committed.is_file() {
        committed
    } else {
        fixtures().join(format!("train_{model}/weights/best.pt"))
    }
}

#[test]
fn raw_head_outputs_of_a_best_pt_match_ultralytics() {
    for case in cases("raw_") {
        let model = YoloModel::load(&weights_for(&case)).unwrap();
        model.to_device(device()).unwrap();
        let x = images_from_u8(&read_npy(case.join("input_u8.npy")).unwrap());
        let head = rusting_brain::no_grad(|| model.forward_head(&x)).unwrap();
        let decoded = model.detect().decode(&head).unwrap();
        let mut worst: f64 = 0.0;
        for (ours, file) in [
            (&head.boxes, "boxes.npy"),
            (&head.scores, "scores.npy"),
            (&decoded, "decoded.npy"),
        ] {
            let theirs = read_npy(case.join(file)).unwrap();
            let e = relative_error(&ours.to_device(Device::Cpu).unwrap(), &theirs);
            eprintln!("{} {file}: max|d|/max|ref| = {e:.2e}", case.display());
            worst = worst.max(e);
        }
        assert!(worst <= 1e-4, "{}: {worst:.2e}", case.display());
    }
}

/// Rows [x1, y1, x2, y2, conf, cls] per image, from JSON.
fn rows_of(v: &serde_json::Value) -> Vec<Vec<[f32; 6]>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|img| {
            img.as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    let r: Vec<f32> = r
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_f64().unwrap() as f32)
                        .collect();
                    [r[0], r[1], r[2], r[3], r[4], r[5]]
                })
                .collect()
        })
        .collect()
}

fn assert_same_rows(ours: &[[f32; 6]], theirs: &[[f32; 6]], what: &str) {
    assert_eq!(
        ours.len(),
        theirs.len(),
        "{what}: kept {} rows, ultralytics {}",
        ours.len(),
        theirs.len()
    );
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        assert_eq!(a[5], b[5], "{what}: row {i} class");
        for k in 0..5 {
            assert!(
                (a[k] - b[k]).abs() <= 1e-3 * b[k].abs().max(1.0),
                "{what}: row {i} {a:?} vs {b:?}"
            );
        }
    }
}

#[test]
fn nms_on_ultralytics_outputs_keeps_the_rows_ultralytics_keeps() {
    for case in cases("raw_") {
        let decoded = read_npy(case.join("decoded.npy")).unwrap();
        let kept = non_max_suppression(&decoded, &NmsOptions::validation()).unwrap();
        let theirs = rows_of(&json(&case.join("meta.json"))["nms"]);
        for (i, (d, t)) in kept.iter().zip(&theirs).enumerate() {
            assert_same_rows(&d.rows(), t, &format!("{} image {i}", case.display()));
        }
    }
}

#[test]
fn val_loader_batch_matches_ultralytics_val_batch() {
    let Some(shapes) = std::env::var_os("RB_YOLO_SHAPES").map(PathBuf::from) else {
        eprintln!("SKIPPED: RB_YOLO_SHAPES (the dataset the fixtures came from) is not set");
        return;
    };
    let data = DataConfig::load(shapes.join("data.yaml")).unwrap();
    let dataset = Arc::new(YoloDataset::load(&data, "val").unwrap());
    for case in cases("raw_") {
        let meta = json(&case.join("meta.json"));
        let theirs = read_npy(case.join("input_u8.npy")).unwrap();
        let (count, imgsz) = (
            theirs.shape()[0],
            case.file_name()
                .unwrap()
                .to_string_lossy()
                .rsplit('_')
                .next()
                .unwrap()
                .parse::<usize>()
                .unwrap(),
        );
        let opts = ValLoaderOptions {
            batch_size: count,
            imgsz,
            stride: 32,
            rect: true,
            workers: 2,
            prefetch: 1,
            ..Default::default()
        };
        let batch = ValLoader::new(dataset.clone(), &opts)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let files: Vec<String> = meta["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_string())
            .collect();
        let ours_files: Vec<String> = batch
            .paths
            .iter()
            .map(|p| p.strip_prefix(&shapes).unwrap().display().to_string())
            .collect();
        assert_eq!(ours_files, files, "{}: image order", case.display());
        assert_eq!(
            batch.images.shape(),
            theirs.shape(),
            "{}: canvas",
            case.display()
        );
        let (a, b) = (
            batch.images.to_vec::<u8>().unwrap(),
            theirs.to_vec::<u8>().unwrap(),
        );
        let diffs: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (*x as f64 - *y as f64).abs())
            .collect();
        let mean = diffs.iter().sum::<f64>() / diffs.len() as f64;
        let max = diffs.iter().cloned().fold(0.0, f64::max);
        eprintln!(
            "{}: preprocessing mean |d| {mean:.3}, max {max}",
            case.display()
        );
        assert!(
            mean <= 0.5 && max <= 3.0,
            "{}: mean {mean} max {max}",
            case.display()
        );
    }
}

#[test]
fn nudenet_onnx_output_matches_onnxruntime_and_its_nms_matches_ultralytics() {
    let Some(onnx) = rb_integration_tests::assets::asset("nudenet_parity", "nudenet/320n.onnx")
    else {
        return;
    };
    let model = YoloModel::load(&onnx).unwrap();
    model.to_device(device()).unwrap();
    for case in cases("nudenet_") {
        let img = rusting_brain::vision::read_image(case.join("input.png")).unwrap();
        let (h, w) = (img.shape()[0], img.shape()[1]);
        let x = img
            .reshape_to(&[1, h, w, 3])
            .unwrap()
            .permute(&[0, 3, 1, 2])
            .unwrap();
        let ours = rusting_brain::no_grad(|| model.forward(&images_from_u8(&x)))
            .unwrap()
            .to_device(Device::Cpu)
            .unwrap();
        let theirs = read_npy(case.join("output.npy")).unwrap();
        let e = relative_error(&ours, &theirs);
        eprintln!("{}: max|d|/max|ref| = {e:.2e}", case.display());
        assert!(e <= 1e-4, "{}: {e:.2e}", case.display());
        let kept = non_max_suppression(
            &theirs,
            &NmsOptions {
                conf_thres: 0.25,
                ..NmsOptions::prediction()
            },
        )
        .unwrap();
        assert_same_rows(
            &kept[0].rows(),
            &rows_of(&json(&case.join("nms.json")))[0],
            &case.display().to_string(),
        );
    }
}
