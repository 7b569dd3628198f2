//! ONNX export checked by its reference reader: each exported model passes onnx.checker's full
//! check and onnxruntime (CPU) reproduces our outputs within 1e-4 relative, through
//! `tests/fixtures/onnx/run_onnxruntime.py`. The Python is `RB_ONNX_PYTHON` (else `python3`);
//! without onnxruntime and onnx importable there, the tests print SKIPPED.

use rb_integration_tests::assets::asset;
use rusting_brain::io::onnx::export::ExportOptions;
use rusting_brain::models::transformer_lm::{LmConfig, LoraConfig, TransformerLm};
use rusting_brain::models::yolo::{definitions, YoloModel};
use rusting_brain::nn::export_module;
use rusting_brain::nn::{Activation, ActivationLayer, Dropout, Linear, Mlp, Module, Sequential};
use rusting_brain::{no_grad, DType, Device, Generator, Tensor};
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
    let (input, bytes): (_, Vec<u8>) = match x.dtype() {
        DType::I64 => (
            dir.join("input.i64"),
            x.to_vec::<i64>()
                .unwrap()
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        ),
        _ => (
            dir.join("input.f32"),
            x.to_vec::<f32>()
                .unwrap()
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        ),
    };
    let output = dir.join("output.f32");
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
    for (i, act) in Activation::ALL.into_iter().enumerate() {
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
        .with(ActivationLayer::new(Activation::Tanh))
        .with(Dropout::new(0.3, &mut gen).unwrap())
        .with(Linear::new(12, 4, false, &mut gen).unwrap());
    model.eval();
    // A rank-3 input: MatMul broadcasts over the leading dimensions.
    check_export(&py, &model, &[1, 3, 6], &randn(&[2, 3, 6], 4), "sequential");
}

/// A small CNN of sequential layers: conv, ReLU, max pooling, conv, PReLU (a slope per
/// channel), average pooling with padding, global average pooling, flatten, linear,
/// log-softmax.
#[test]
fn onnxruntime_reproduces_an_exported_cnn_of_pooling_and_flatten_layers() {
    use rusting_brain::nn::{
        AdaptiveAvgPool2d, AvgPool2d, Conv2d, Flatten, MaxPool2d, PRelu, Softmax, Window,
    };
    use rusting_brain::Conv2dOptions;
    let Some(py) =
        onnxruntime("onnxruntime_reproduces_an_exported_cnn_of_pooling_and_flatten_layers")
    else {
        return;
    };
    let mut gen = Generator::new(5);
    let mut prelu = PRelu::new(8, 0.25).unwrap();
    // Slopes that differ by channel, so a slope broadcast over the wrong dim shows.
    prelu.weight = Tensor::from_vec((0..8).map(|c| c as f32 * 0.1 - 0.2).collect(), &[8]).unwrap();
    let pad1 = Conv2dOptions {
        padding: (1, 1),
        ..Conv2dOptions::default()
    };
    let mut model = Sequential::new()
        .with(Conv2d::new(3, 8, (3, 3), pad1, true, &mut gen).unwrap())
        .with(ActivationLayer::new(Activation::Relu))
        .with(MaxPool2d::new(Window::new((2, 2))))
        .with(Conv2d::new(8, 8, (3, 3), pad1, true, &mut gen).unwrap())
        .with(prelu)
        .with(AvgPool2d::new(Window {
            kernel: (3, 3),
            stride: (1, 1),
            padding: (1, 1),
        }))
        .with(AdaptiveAvgPool2d::new((1, 1)))
        .with(Flatten::new(1))
        .with(Linear::new(8, 3, true, &mut gen).unwrap())
        .with(Softmax::log(1));
    model.eval();
    check_export(
        &py,
        &model,
        &[1, 3, 12, 10],
        &randn(&[2, 3, 12, 10], 6),
        "cnn",
    );
}

#[test]
fn a_layer_without_an_onnx_mapping_is_an_error_naming_it() {
    let mut gen = Generator::new(0);
    let model = Sequential::new()
        .with(Linear::new(4, 4, true, &mut gen).unwrap())
        .with(rusting_brain::nn::LayerNorm::new(&[4], 1e-5, true).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let err = export_module(
        &model,
        &[1, 4],
        dir.path().join("m.onnx"),
        &ExportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("1.") && err.contains("LayerNorm"), "{err}");
}

/// A tiny LLaMA-shaped model: grouped heads (4 query heads over 2 key/value heads), a
/// separate or tied head, causal or bidirectional.
fn tiny_lm(tied: bool, bidirectional: bool, seed: u64) -> TransformerLm {
    let mut c = LmConfig::new(61, 32, 2, 4);
    c.n_kv_heads = 2;
    c.ffn_hidden = 48;
    c.max_seq_len = 24;
    c.tied_embeddings = tied;
    c.bidirectional = bidirectional;
    c.init_std = 0.2;
    let mut m = TransformerLm::new(c, &mut Generator::new(seed)).unwrap();
    m.eval();
    m
}

fn token_ids(batch: usize, len: usize, seed: u64) -> Tensor {
    let mut gen = Generator::new(seed);
    let u = Tensor::rand(&[batch, len], DType::F32, Some(&mut gen)).unwrap();
    let ids: Vec<i64> = u
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| (v * 61.0) as i64 % 61)
        .collect();
    Tensor::from_vec(ids, &[batch, len]).unwrap()
}

#[test]
fn onnxruntime_reproduces_an_exported_language_model_at_any_batch_and_window() {
    let Some(py) =
        onnxruntime("onnxruntime_reproduces_an_exported_language_model_at_any_batch_and_window")
    else {
        return;
    };
    for (tied, bidirectional) in [(false, false), (true, false), (true, true)] {
        let model = tiny_lm(tied, bidirectional, 7);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lm.onnx");
        // Opset 18 moved ReduceMean's axes to an input; one export takes that path.
        let opts = ExportOptions {
            opset: if bidirectional { 18 } else { 17 },
            dynamic_batch: true,
        };
        model.export_onnx(&path, &opts).unwrap();
        // One export serves every batch and window length up to max_seq_len.
        for (batch, len) in [(1, 1), (2, 9), (3, 24)] {
            let ids = token_ids(batch, len, (batch * 100 + len) as u64);
            let want = no_grad(|| model.forward(&ids)).unwrap();
            let got = run_onnxruntime(&py, &path, &ids);
            let err = relative_error(&got, &want);
            assert!(
                err <= 1e-4,
                "tied {tied}, bidirectional {bidirectional}, [{batch}, {len}]: {err:.2e} relative"
            );
        }
    }
}

/// Exports `model` at `size` and compares onnxruntime's detections with ours on `x`.
fn check_yolo(py: &str, model: &YoloModel, size: (usize, usize), x: &Tensor, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("yolo.onnx");
    model
        .export_onnx(size, &path, &ExportOptions::default())
        .unwrap();
    let want = no_grad(|| model.forward(x)).unwrap();
    let got = run_onnxruntime(py, &path, x);
    let err = relative_error(&got, &want);
    assert!(
        err <= 1e-4,
        "{what}: onnxruntime differs by {err:.2e} relative"
    );
}

#[test]
fn onnxruntime_reproduces_exported_yolo11_and_yolov8_with_and_without_folded_batch_norms() {
    let Some(py) = onnxruntime(
        "onnxruntime_reproduces_exported_yolo11_and_yolov8_with_and_without_folded_batch_norms",
    ) else {
        return;
    };
    // YOLO11 has the C3k2, C2PSA attention and depth-wise head convolutions; YOLOv8 the
    // C2f and plain head. Random weights, and random running statistics (means in ±0.5,
    // variances in 0.5..1.5), so the batch norms matter.
    for (name, nc) in [("yolo11n.yaml", 5), ("yolov8n.yaml", 3)] {
        let cfg = definitions::builtin(name, Some(nc)).unwrap().unwrap();
        let mut model = YoloModel::build(&cfg, vec![], false, &mut Generator::new(1)).unwrap();
        let mut state = model.state_dict();
        for (i, (key, t)) in state.iter_mut().enumerate() {
            let u = Tensor::rand(t.dims(), DType::F32, Some(&mut Generator::new(i as u64)));
            if key.ends_with("running_mean") {
                *t = u.unwrap().add_scalar(-0.5).unwrap();
            } else if key.ends_with("running_var") {
                *t = u.unwrap().add_scalar(0.5).unwrap();
            }
        }
        model.load_weights(&state, "random statistics").unwrap();
        model.eval();
        let x = randn(&[2, 3, 64, 96], 60).abs().unwrap();
        check_yolo(&py, &model, (64, 96), &x, name);
        let fused = model.fuse().unwrap();
        check_yolo(&py, &fused, (64, 96), &x, &format!("{name} fused"));
    }
}

#[test]
fn onnxruntime_reproduces_a_real_yolov8n_reexported_from_its_ultralytics_onnx() {
    let test = "onnxruntime_reproduces_a_real_yolov8n_reexported_from_its_ultralytics_onnx";
    let Some(py) = onnxruntime(test) else {
        return;
    };
    let Some(path) = asset(test, "nudenet/320n.onnx") else {
        return;
    };
    let mut model = YoloModel::load(&path).unwrap();
    model.eval();
    let x = Tensor::rand(&[1, 3, 320, 320], DType::F32, Some(&mut Generator::new(9))).unwrap();
    check_yolo(&py, &model, (320, 320), &x, "nudenet YOLOv8n");
}

#[test]
fn a_yolo_export_at_a_size_off_the_stride_is_an_error_naming_it() {
    let cfg = definitions::builtin("yolov8n.yaml", Some(2))
        .unwrap()
        .unwrap();
    let model = YoloModel::build(&cfg, vec![], true, &mut Generator::new(0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let err = model
        .export_onnx(
            (100, 64),
            dir.path().join("y.onnx"),
            &ExportOptions::default(),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("multiples of 32") && err.contains("100x64"),
        "{err}"
    );
}

#[test]
fn onnxruntime_reproduces_a_language_model_with_lora_adapters_exported_merged() {
    let Some(py) =
        onnxruntime("onnxruntime_reproduces_a_language_model_with_lora_adapters_exported_merged")
    else {
        return;
    };
    let mut model = tiny_lm(false, false, 11);
    model
        .add_lora(LoraConfig {
            targets: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
            ..Default::default()
        })
        .unwrap();
    // Fresh adapters add nothing (B = 0): give every B values, so the export must carry them.
    for (i, (name, t)) in model.named_parameters().into_iter().enumerate() {
        if name.ends_with("lora_B.weight") {
            let v = Tensor::randn(t.dims(), DType::F32, Some(&mut Generator::new(i as u64)));
            no_grad(|| t.copy_(&v?.mul_scalar(0.3)?)).unwrap();
        }
    }
    let ids = token_ids(2, 10, 5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lora.onnx");
    model.export_onnx(&path, &ExportOptions::default()).unwrap();
    let want = no_grad(|| model.forward(&ids)).unwrap();
    let got = run_onnxruntime(&py, &path, &ids);
    let err = relative_error(&got, &want);
    assert!(err <= 1e-4, "{err:.2e} relative");
}

/// A transposed convolution (strided, padded, output padding, grouped) as ONNX's ConvTranspose.
#[test]
fn onnxruntime_reproduces_an_exported_transposed_convolution() {
    use rusting_brain::nn::ConvTranspose2d;
    use rusting_brain::ConvTranspose2dOptions;
    let Some(py) = onnxruntime("onnxruntime_reproduces_an_exported_transposed_convolution") else {
        return;
    };
    let opts = ConvTranspose2dOptions {
        stride: (2, 2),
        padding: (1, 1),
        output_padding: (1, 1),
        groups: 2,
        ..Default::default()
    };
    let up = ConvTranspose2d::new(4, 6, (3, 3), opts, true, &mut Generator::new(8)).unwrap();
    check_export(
        &py,
        &up,
        &[1, 4, 5, 5],
        &randn(&[2, 4, 5, 5], 9),
        "conv_transpose2d",
    );
}

/// Each dense family's ONNX export (Qwen2's biases, Qwen3's head norms, Mistral's window,
/// Gemma's scaled embedding, 1 + weight norms and GeGLU, Gemma 2's post-norms, scale, window
/// and soft caps, Phi-3, Llama 3's and YaRN's rotary scaling, the mixtures of experts of
/// Mixtral, Qwen2-MoE, Qwen3-MoE and OLMoE), run by onnxruntime, gives transformers' logits of
/// the family fixtures.
#[test]
fn onnxruntime_reproduces_each_language_model_familys_export() {
    use rusting_brain::models::transformer_lm::pretrained::load_pretrained;
    let Some(py) = onnxruntime("onnxruntime_reproduces_each_language_model_familys_export") else {
        return;
    };
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/lm_families");
    for family in [
        "qwen2",
        "qwen3",
        "mistral",
        "gemma",
        "gemma2",
        "phi3",
        "llama3_rope",
        "qwen2_yarn",
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
        "olmoe",
    ] {
        let model = load_pretrained(fixtures.join(family), DType::F32, Device::Cpu).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lm.onnx");
        model.export_onnx(&path, &ExportOptions::default()).unwrap();
        let want = rusting_brain::io::safetensors::load(
            fixtures.join(family).join("expected.safetensors"),
        )
        .unwrap();
        // The export's batch is 1: row by row.
        for row in 0..2 {
            let ids = want["input_ids"]
                .narrow(0, row, 1)
                .unwrap()
                .contiguous_copy()
                .unwrap();
            let got = run_onnxruntime(&py, &path, &ids);
            let expected = want["logits"]
                .narrow(0, row, 1)
                .unwrap()
                .contiguous_copy()
                .unwrap();
            let err = relative_error(&got, &expected);
            assert!(
                err <= 1e-4,
                "{family} row {row}: onnxruntime differs by {err:.2e} relative"
            );
        }
    }
}
