//! ONNX export checked by its reference reader: each exported model passes onnx.checker's full
//! check and onnxruntime (CPU) reproduces our outputs within 1e-4 relative, through
//! `tests/fixtures/onnx/run_onnxruntime.py`. The Python is `RB_ONNX_PYTHON` (else `python3`);
//! without onnxruntime and onnx importable there, the tests print SKIPPED.

use rusting_brain::io::onnx::export::{export_module, ExportOptions};
use rusting_brain::nn::{Activation, Dropout, Linear, Mlp, Module, Sequential, Tanh};
use rusting_brain::{no_grad, DType, Generator, Tensor};
use std::path::{Path, PathBuf};
use std::process::Command;

fn python() -> String {
    std::env::var("RB_ONNX_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The Python to run onnxruntime with, or `None` after printing SKIPPED.
fn onnxruntime(test: &str) -> Option<String> {
    let py = python();
    let ok = Command::new(&py)
        .args(["-c", "import onnxruntime, onnx"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED {test}: {py} cannot import onnxruntime and onnx (set RB_ONNX_PYTHON)");
        return None;
    }
    Some(py)
}

/// onnxruntime's output for `x` from the model at `path`.
fn run_onnxruntime(py: &str, path: &Path, x: &Tensor) -> Tensor {
    let dir = path.parent().unwrap();
    let (input, output) = (dir.join("input.f32"), dir.join("output.f32"));
    let bytes: Vec<u8> = x
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(&input, bytes).unwrap();
    let shape: Vec<String> = x.dims().iter().map(|d| d.to_string()).collect();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/onnx/run_onnxruntime.py");
    let out = Command::new(py)
        .arg(&script)
        .arg(path)
        .arg(&input)
        .arg(shape.join(","))
        .arg(&output)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "onnxruntime failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dims: Vec<usize> = String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(',')
        .map(|d| d.parse().unwrap())
        .collect();
    let values: Vec<f32> = std::fs::read(&output)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Tensor::from_vec(values, &dims).unwrap()
}

fn relative_error(got: &Tensor, want: &Tensor) -> f32 {
    assert_eq!(got.dims(), want.dims());
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    let scale = w.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
    let worst = g
        .iter()
        .zip(&w)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    worst / scale
}

/// Exports `model`, runs onnxruntime on `x` at a batch other than the export's (the batch is
/// dynamic), and compares with our forward.
fn check_export(py: &str, model: &dyn Module, export_shape: &[usize], x: &Tensor, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.onnx");
    export_module(model, export_shape, &path, &ExportOptions::default()).unwrap();
    let want = no_grad(|| model.forward(x)).unwrap();
    let got = run_onnxruntime(py, &path, x);
    let err = relative_error(&got, &want);
    assert!(
        err <= 1e-4,
        "{what}: onnxruntime differs by {err:.2e} relative"
    );
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, Some(&mut Generator::new(seed))).unwrap()
}

#[test]
fn onnxruntime_reproduces_exported_mlps_for_every_activation() {
    let Some(py) = onnxruntime("onnxruntime_reproduces_exported_mlps_for_every_activation") else {
        return;
    };
    for (i, act) in [
        Activation::Relu,
        Activation::Gelu,
        Activation::Silu,
        Activation::Tanh,
    ]
    .into_iter()
    .enumerate()
    {
        let mut mlp = Mlp::new(&[5, 16, 8, 3], act, &mut Generator::new(i as u64)).unwrap();
        mlp.eval();
        check_export(
            &py,
            &mlp,
            &[2, 5],
            &randn(&[7, 5], 10 + i as u64),
            &format!("{act:?}"),
        );
    }
}

#[test]
fn onnxruntime_reproduces_an_exported_sequential_with_dropout_left_out() {
    let Some(py) =
        onnxruntime("onnxruntime_reproduces_an_exported_sequential_with_dropout_left_out")
    else {
        return;
    };
    let mut gen = Generator::new(3);
    let mut model = Sequential::new()
        .with(Linear::new(6, 12, true, &mut gen).unwrap())
        .with(Tanh::default())
        .with(Dropout::new(0.3, &mut gen).unwrap())
        .with(Linear::new(12, 4, false, &mut gen).unwrap());
    model.eval();
    // A rank-3 input: MatMul broadcasts over the leading dimensions.
    check_export(&py, &model, &[1, 3, 6], &randn(&[2, 3, 6], 4), "sequential");
}

#[test]
fn a_layer_without_an_onnx_mapping_is_an_error_naming_it() {
    let mut gen = Generator::new(0);
    let model = Sequential::new()
        .with(Linear::new(4, 4, true, &mut gen).unwrap())
        .with(rusting_brain::nn::Embedding::new(10, 4, &mut gen).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let err = export_module(
        &model,
        &[1, 4],
        dir.path().join("m.onnx"),
        &ExportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("1.") && err.contains("Embedding"), "{err}");
}
