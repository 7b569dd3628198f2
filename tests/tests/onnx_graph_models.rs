//! Seven published ONNX models nobody here made, run as graphs (`OnnxGraph`) and checked against
//! onnxruntime on the same input: every output within 1e-4 (relative to the output's scale).
//! The models come from PyPI wheels (scripts/fetch_test_assets.sh); onnxruntime from
//! `RB_ONNX_PYTHON` (else `python3`), through tests/fixtures/onnx/run_graph.py. Without either
//! the tests print SKIPPED. The same seven run again on CUDA (the graph moved with `to_device`)
//! where a device is present.

use rb_integration_tests::assets::asset;
use rusting_brain::graph::OnnxGraph;
use rusting_brain::io::npy::{read_npy, write_npy};
use rusting_brain::nn::Module;
use rusting_brain::{DType, Device, Generator, Tensor};
use std::path::{Path, PathBuf};
use std::process::Command;

fn onnxruntime(test: &str) -> Option<String> {
    let py = std::env::var("RB_ONNX_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import onnxruntime"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED {test}: {py} cannot import onnxruntime (set RB_ONNX_PYTHON)");
        return None;
    }
    Some(py)
}

/// onnxruntime's outputs for `feeds`.
fn reference(py: &str, model: &Path, feeds: &[(String, Tensor)], dir: &Path) -> Vec<Tensor> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/onnx/run_graph.py");
    let mut cmd = Command::new(py);
    cmd.arg(&script).arg(model).arg(dir);
    for (i, (name, t)) in feeds.iter().enumerate() {
        let path = dir.join(format!("input_{i}.npy"));
        write_npy(&path, t).unwrap();
        cmd.arg(format!("{name}={}", path.display()));
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "onnxruntime failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names = String::from_utf8_lossy(&out.stdout);
    (0..names.trim().split(',').count())
        .map(|i| read_npy(dir.join(format!("output_{i}.npy"))).unwrap())
        .collect()
}

/// The largest difference over the output's scale (its largest magnitude, at least 1).
fn relative_error(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    g.iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
        / scale
}

/// Loads the asset, runs it on `input` and onnxruntime on the same, and compares every output.
fn check(test: &str, relative: &str, input: Tensor) {
    check_on(test, relative, input, Device::Cpu);
}

/// `check` with the graph and its input on `device`.
fn check_on(test: &str, relative: &str, input: Tensor, device: Device) {
    let Some(path) = asset(test, relative) else {
        return;
    };
    let Some(py) = onnxruntime(test) else { return };
    let graph = OnnxGraph::load(&path).unwrap();
    graph.to_device(device).unwrap();
    let name = graph.inputs[0].0.clone();
    let ours = graph
        .run(&[(name.clone(), input.to_device(device).unwrap())])
        .unwrap();
    let feeds = vec![(name, input)];
    let dir = tempdir(test);
    let theirs = reference(&py, &path, &feeds, &dir);
    assert_eq!(ours.len(), theirs.len());
    for ((name, got), want) in ours.iter().zip(&theirs) {
        assert_eq!(got.device(), device, "{test}: output `{name}`");
        let got = got.to_device(Device::Cpu).unwrap();
        let err = relative_error(&got.to_dtype(DType::F32).unwrap(), want);
        eprintln!(
            "{test}: output `{name}` {:?}, relative error {err:.2e}",
            got.shape()
        );
        assert!(
            err <= 1e-4,
            "{test}: output `{name}` differs from onnxruntime by {err:.2e}"
        );
    }
}

fn tempdir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rb-onnx-graph-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An image-like input in [0, 1), the same every run.
fn image(shape: &[usize], seed: u64) -> Tensor {
    Tensor::rand(shape, DType::F32, Some(&mut Generator::new(seed))).unwrap()
}

/// The published models: test name, asset path, and the input each runs on.
fn published() -> Vec<(&'static str, &'static str, Tensor)> {
    // 1,536 bytes of a file: a byte per position, as magika's features read them.
    let bytes = Tensor::randint(0, 256, &[1, 1536], Some(&mut Generator::new(6))).unwrap();
    vec![
        (
            "nudenet_yolov8n",
            "nudenet/320n.onnx",
            image(&[1, 3, 320, 320], 1),
        ),
        (
            "ppocr_det",
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
            image(&[1, 3, 256, 320], 2),
        ),
        (
            "ppocr_rec",
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
            image(&[1, 3, 48, 320], 3),
        ),
        (
            "ppocr_cls",
            "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
            image(&[1, 3, 48, 192], 4),
        ),
        (
            "ddddocr_det",
            "ddddocr/common_det.onnx",
            image(&[1, 3, 416, 416], 5),
        ),
        (
            "ddddocr_ocr",
            "ddddocr/common.onnx",
            image(&[1, 1, 64, 160], 7),
        ),
        ("magika", "magika/models/standard_v1/model.onnx", bytes),
    ]
}

/// The published model `test` on the CPU.
fn check_published(test: &str) {
    let (_, path, input) = published()
        .into_iter()
        .find(|c| c.0 == test)
        .unwrap_or_else(|| panic!("{test} is not in published()"));
    check(test, path, input);
}

#[test]
fn yolov8n_detector_from_nudenet_matches_onnxruntime() {
    check_published("nudenet_yolov8n");
}

#[test]
fn pp_ocrv4_text_detector_matches_onnxruntime() {
    check_published("ppocr_det");
}

#[test]
fn pp_ocrv4_svtr_recognizer_matches_onnxruntime() {
    check_published("ppocr_rec");
}

#[test]
fn pp_ocr_direction_classifier_matches_onnxruntime() {
    check_published("ppocr_cls");
}

#[test]
fn ddddocr_detector_matches_onnxruntime() {
    check_published("ddddocr_det");
}

#[test]
fn ddddocr_cnn_and_lstm_recognizer_matches_onnxruntime() {
    check_published("ddddocr_ocr");
}

#[test]
fn magika_file_type_model_matches_onnxruntime() {
    check_published("magika");
}

/// Every published model again with the graph on CUDA: the same ops through the device's
/// kernels, against the same onnxruntime (CPU) outputs.
#[test]
fn published_graphs_on_cuda_match_onnxruntime() {
    let Some(cuda) = rusting_brain::backend::cuda::device_for_test("onnx_graphs_on_cuda") else {
        return;
    };
    for (test, path, input) in published() {
        check_on(&format!("cuda_{test}"), path, input, cuda);
    }
}

#[test]
fn an_onnx_graph_prints_as_a_module_with_its_weights_as_parameters() {
    let Some(path) = asset(
        "onnx_graph_module",
        "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
    ) else {
        return;
    };
    let graph = OnnxGraph::load(&path).unwrap();
    let text = graph.title();
    assert!(text.starts_with("OnnxGraph(nodes="), "{text}");
    assert!(!graph.named_parameters().is_empty());
    // BatchNormalization's statistics are buffers, not trained.
    assert!(graph
        .named_buffers()
        .iter()
        .any(|(n, _)| n.contains("mean") || n.contains("var")));
}
