//! YOLO inference on the GPU, beside `yolo_torch_bench.py` (run both in one call):
//! - forward: ms per batch of the fused network's forward (raw head and decode), half precision
//!   unless `--f32`, for a freshly built `yolo11{scale}` (weights do not change the time).
//! - profile: one forward inside the profiler's capture range, after warm-up: run under
//!   `ncu --profile-from-start off` to time each kernel of exactly one forward.
//! - convs: every convolution of the network's forward alone through cuDNN, BF16, forward,
//!   input gradient and weight gradient, NHWC and NCHW; `--shapes FILE` writes the shapes for
//!   `conv_torch_bench.py`, which times `F.conv2d` on the same ones.
//!
//! cargo build --release -p rb_benches --bin yolo_bench
//! target/release/yolo_bench forward --scale n --batch 32 --imgsz 640 --iters 50
//! Prints one JSON object per line. Without a usable GPU it prints {"error": ...} and exits 2.

#[path = "common.rs"]
mod common;

use rusting_brain::amp::autocast;
use rusting_brain::backend::cuda::{self, cudnn, CudaStorage};
use rusting_brain::backend::spec::Conv2dGeometry;
use rusting_brain::backend::Storage;
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

/// As the validator runs it: F16 through autocast when the input is F16, in one autocast scope
/// (each weight is cast once).
fn with_autocast<R>(x: &Tensor, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let dtype = (x.dtype() == DType::F16).then_some(DType::F16);
    autocast(dtype, f)
}

fn forward(model: &YoloModel, x: &Tensor) -> Result<Tensor> {
    no_grad(|| model.forward(x))
}

fn time_forward(dev: &cuda::CudaDevice, d: Device) -> Result<serde_json::Value> {
    let (model, x, dtype) = setup(d)?;
    let iters = num("--iters", 50);
    let ms = with_autocast(&x, || {
        for _ in 0..5 {
            forward(&model, &x)?;
        }
        dev.synchronize()?;
        let t = Instant::now();
        for _ in 0..iters {
            forward(&model, &x)?;
        }
        dev.synchronize()?;
        Ok(t.elapsed().as_secs_f64() * 1e3 / iters as f64)
    })?;
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
    with_autocast(&x, || {
        for _ in 0..3 {
            forward(&model, &x)?;
        }
        dev.synchronize()?;
        dev.profiler_capture(true)?;
        forward(&model, &x)?;
        dev.synchronize()?;
        dev.profiler_capture(false)
    })?;
    Ok(json!({"name": "one profiled yolo forward"}))
}

/// A BF16 tensor of `len` random values on the device.
fn random_bf16(d: Device, len: usize, seed: u64) -> Result<Tensor> {
    Tensor::randn(&[len], DType::F32, Some(&mut Generator::new(seed)))?.to(d, DType::BF16)
}

fn on_cuda(s: &Storage) -> &CudaStorage {
    match s {
        Storage::Cuda(c) => c,
        Storage::Cpu(_) => unreachable!("made on CUDA"),
    }
}

/// Mean ms of `f` over `iters` queued calls, after warm-up.
fn time_ms(
    dev: &cuda::CudaDevice,
    iters: usize,
    mut f: impl FnMut() -> Result<CudaStorage>,
) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    dev.synchronize()?;
    let t = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    dev.synchronize()?;
    Ok(t.elapsed().as_secs_f64() * 1e3 / iters as f64)
}

/// The three products of one convolution shape in one layout: ms each, and cuDNN's choices.
fn time_conv(
    dev: &cuda::CudaDevice,
    d: Device,
    g: &Conv2dGeometry,
    format: cudnn::Format,
    iters: usize,
) -> Result<serde_json::Value> {
    let x = random_bf16(d, g.n * g.c * g.h * g.w, 1)?;
    let w = random_bf16(d, g.o * g.cg() * g.kh * g.kw, 2)?;
    let dy = random_bf16(d, g.n * g.o * g.ho * g.wo, 3)?;
    let (xs, ws, dys) = (x.storage(), w.storage(), dy.storage());
    let (x, w, dy) = (on_cuda(&xs), on_cuda(&ws), on_cuda(&dys));
    let run = |pass, a: &CudaStorage, b: &CudaStorage| {
        cuda::conv::run_pass(pass, format, (a, 0), (b, 0), g)
    };
    let fwd = time_ms(dev, iters, || run(cudnn::Pass::Forward, x, w))?;
    let dgrad = time_ms(dev, iters, || run(cudnn::Pass::InputGrad, dy, w))?;
    let wgrad = time_ms(dev, iters, || run(cudnn::Pass::WeightGrad, x, dy))?;
    let algos: Vec<String> = cuda::conv::plans()
        .into_iter()
        .filter(|p| p.geometry == *g && p.format == format && p.dtype == DType::BF16)
        .map(|p| format!("{:?}: {}", p.pass, p.algorithm))
        .collect();
    let r = |v: f64| (v * 1e4).round() / 1e4;
    Ok(json!({"fwd_ms": r(fwd), "dgrad_ms": r(dgrad), "wgrad_ms": r(wgrad), "algorithms": algos}))
}

/// Every distinct convolution of one forward (with how often it occurs), timed alone.
fn convs(dev: &cuda::CudaDevice, d: Device) -> Result<serde_json::Value> {
    let (model, x, _) = setup(d)?;
    with_autocast(&x, || forward(&model, &x))?;
    dev.synchronize()?;
    let mut shapes: Vec<(Conv2dGeometry, usize)> = Vec::new();
    for p in cuda::conv::plans() {
        if p.pass != cudnn::Pass::Forward {
            continue;
        }
        match shapes.iter_mut().find(|(g, _)| *g == p.geometry) {
            Some((_, count)) => *count += 1,
            None => shapes.push((p.geometry, 1)),
        }
    }
    shapes.sort_by_key(|(g, _)| (g.h, g.c, g.o, g.kh, g.groups));
    let iters = num("--iters", 20);
    let (mut total_nhwc, mut total_nchw) = ([0f64; 3], [0f64; 3]);
    let mut rows = Vec::new();
    for (g, count) in &shapes {
        let nhwc = time_conv(dev, d, g, cudnn::Format::Nhwc, iters)?;
        let nchw = time_conv(dev, d, g, cudnn::Format::Nchw, iters)?;
        for (i, k) in ["fwd_ms", "dgrad_ms", "wgrad_ms"].iter().enumerate() {
            total_nhwc[i] += nhwc[k].as_f64().unwrap_or(0.0) * *count as f64;
            total_nchw[i] += nchw[k].as_f64().unwrap_or(0.0) * *count as f64;
        }
        let shape = json!({"n": g.n, "c": g.c, "h": g.h, "w": g.w, "o": g.o, "k": g.kh,
            "stride": g.stride.0, "padding": g.padding.0, "groups": g.groups, "count": count});
        println!(
            "{}",
            json!({"name": "rusting_brain conv", "shape": shape, "nhwc": nhwc, "nchw": nchw})
        );
        rows.push(shape);
    }
    if let Some(path) = std::env::args()
        .position(|a| a == "--shapes")
        .and_then(|i| std::env::args().nth(i + 1))
    {
        std::fs::write(&path, serde_json::to_string(&rows).unwrap_or_default())
            .map_err(|e| rusting_brain::Error::invalid("yolo_bench", format!("{path}: {e}")))?;
    }
    let r = |v: [f64; 3]| {
        json!({"fwd_ms": (v[0] * 100.0).round() / 100.0,
        "bwd_ms": ((v[1] + v[2]) * 100.0).round() / 100.0})
    };
    Ok(
        json!({"name": "rusting_brain convs total (bf16, each shape times its count)",
        "shapes": shapes.len(), "nhwc": r(total_nhwc), "nchw": r(total_nchw)}),
    )
}

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "forward".into());
    let dev = common::cuda_or_exit("yolo");
    let d = Device::Cuda(0);
    let r = match what.as_str() {
        "profile" => profile(&dev, d),
        "convs" => convs(&dev, d),
        _ => time_forward(&dev, d),
    };
    match r {
        Ok(v) => println!("{v}"),
        Err(e) => println!("{}", json!({"bench": "yolo", "error": e.to_string()})),
    }
}
