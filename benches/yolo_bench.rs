//! YOLO inference on the GPU, beside `yolo_torch_bench.py` (run both in one call):
//! - forward: ms per batch of the fused network's forward (raw head and decode), half precision
//!   unless `--f32`, for a freshly built `yolo11{scale}` (weights do not change the time).
//! - profile: one forward inside the profiler's capture range, after warm-up: run under
//!   `ncu --profile-from-start off` to time each kernel of exactly one forward.
//!
//! cargo build --release -p rb_benches --bin yolo_bench
//! target/release/yolo_bench forward --scale n --batch 32 --imgsz 640 --iters 50
//! Prints one JSON object per line. Without a usable GPU it prints {"error": ...} and exits 2.

#[path = "common.rs"]
mod common;

use rusting_brain::amp::autocast;
use rusting_brain::backend::cuda;
use rusting_brain::models::yolo::YoloModel;
use rusting_brain::nn::Module;
use rusting_brain::{no_grad, DType, Device, Generator, Result, Tensor};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn num(name: &str, default: usize) -> usize {
    arg(name, &default.to_string()).parse().unwrap_or(default)
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// The fused network on the device, and a batch of images in [0, 1].
fn setup(d: Device) -> Result<(YoloModel, Tensor, DType)> {
    let scale = arg("--scale", "n");
    let model = YoloModel::load(Path::new(&format!("yolo11{scale}.yaml")))?;
    model.to_device(d)?;
    let model = model.fuse()?;
    let dtype = if flag("--f32") {
        DType::F32
    } else {
        DType::F16
    };
    let (b, s) = (num("--batch", 32), num("--imgsz", 640));
    let x = Tensor::rand(&[b, 3, s, s], DType::F32, Some(&mut Generator::new(0)))?.to(d, dtype)?;
    Ok((model, x, dtype))
}

/// As the validator runs it: F16 through autocast when the input is F16.
fn forward(model: &YoloModel, x: &Tensor) -> Result<Tensor> {
    let dtype = (x.dtype() == DType::F16).then_some(DType::F16);
    no_grad(|| autocast(dtype, || model.forward(x)))
}

fn time_forward(dev: &cuda::CudaDevice, d: Device) -> Result<serde_json::Value> {
    let (model, x, dtype) = setup(d)?;
    let iters = num("--iters", 50);
    for _ in 0..5 {
        forward(&model, &x)?;
    }
    dev.synchronize()?;
    let t = Instant::now();
    for _ in 0..iters {
        forward(&model, &x)?;
    }
    dev.synchronize()?;
    let ms = t.elapsed().as_secs_f64() * 1e3 / iters as f64;
    let b = x.shape()[0] as f64;
    Ok(json!({
        "name": "rusting_brain yolo forward",
        "scale": arg("--scale", "n"), "batch": x.shape()[0], "imgsz": x.shape()[2],
        "dtype": format!("{dtype:?}"),
        "ms_per_batch": (ms * 100.0).round() / 100.0,
        "ms_per_image": (ms / b * 1000.0).round() / 1000.0,
        "images_per_s": (b * 1e3 / ms).round(),
    }))
}

fn profile(dev: &cuda::CudaDevice, d: Device) -> Result<serde_json::Value> {
    let (model, x, _) = setup(d)?;
    for _ in 0..3 {
        forward(&model, &x)?;
    }
    dev.synchronize()?;
    dev.profiler_capture(true)?;
    forward(&model, &x)?;
    dev.synchronize()?;
    dev.profiler_capture(false)?;
    Ok(json!({"name": "one profiled yolo forward"}))
}

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "forward".into());
    let dev = common::cuda_or_exit("yolo");
    let d = Device::Cuda(0);
    let r = match what.as_str() {
        "profile" => profile(&dev, d),
        _ => time_forward(&dev, d),
    };
    match r {
        Ok(v) => println!("{v}"),
        Err(e) => println!("{}", json!({"bench": "yolo", "error": e.to_string()})),
    }
}
