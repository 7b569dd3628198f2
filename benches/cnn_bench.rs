//! A CNN training step on the GPU (torchvision's ResNet shape), beside `torch_cnn_bench.py`
//! (run both in one call): images per second of forward, cross-entropy, backward and an SGD
//! step with momentum and weight decay, under BF16 autocast, on random images and labels.
//!
//! cargo build --release -p rb_benches --bin cnn_bench
//! target/release/cnn_bench --depth 18 --batch 128 --imgsz 224 --steps 20
//! `RB_CHANNELS_LAST=1` runs the convolutions channels-last. `--profile` puts one step after
//! the warm-up inside the profiler's capture range (`ncu --profile-from-start off`). Prints one
//! JSON line; without a usable GPU it prints {"error": ...} and exits 2.

#[path = "common.rs"]
mod common;

use rusting_brain::amp::autocast;
use rusting_brain::models::resnet::{ResNet, ResNetConfig};
use rusting_brain::nn::Module;
use rusting_brain::optim::{Optimizer, Sgd, SgdConfig};
use rusting_brain::{cross_entropy, CrossEntropyOptions, DType, Device, Generator, Result, Tensor};
use serde_json::json;
use std::time::Instant;

/// One training step; returns the loss (still on the device).
fn step(model: &ResNet, opt: &mut Sgd, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let loss = autocast(Some(DType::BF16), || {
        cross_entropy(&model.forward(x)?, y, CrossEntropyOptions::default())
    })?;
    loss.backward()?;
    opt.step()?;
    opt.zero_grad();
    Ok(loss)
}

fn train(dev: &rusting_brain::backend::cuda::CudaDevice, d: Device) -> Result<serde_json::Value> {
    let (depth, batch, size, steps) = (
        common::num("--depth", 18),
        common::num("--batch", 128),
        common::num("--imgsz", 224),
        common::num("--steps", 20),
    );
    let mut gen = Generator::new(0);
    let model = ResNet::new(ResNetConfig::depth(depth, 1000)?, &mut gen)?;
    model.to_device(d)?;
    let mut opt = Sgd::new(
        model.parameters(),
        SgdConfig {
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 1e-4,
            ..Default::default()
        },
    )?;
    let x = Tensor::rand(&[batch, 3, size, size], DType::F32, Some(&mut gen))?.to_device(d)?;
    let y = Tensor::randint(0, 1000, &[batch], Some(&mut gen))?.to_device(d)?;
    for _ in 0..5 {
        step(&model, &mut opt, &x, &y)?;
    }
    dev.synchronize()?;
    if std::env::args().any(|a| a == "--profile") {
        dev.profiler_capture(true)?;
        step(&model, &mut opt, &x, &y)?;
        dev.synchronize()?;
        dev.profiler_capture(false)?;
    }
    let t = Instant::now();
    let mut loss = None;
    for _ in 0..steps {
        loss = Some(step(&model, &mut opt, &x, &y)?);
    }
    dev.synchronize()?;
    let dt = t.elapsed().as_secs_f64() / steps as f64;
    let loss = loss.map(|l| l.item()).transpose()?.unwrap_or(f64::NAN);
    Ok(json!({
        "bench": "cnn_train",
        "model": format!("resnet{depth}"),
        "batch": batch,
        "imgsz": size,
        "channels_last": std::env::var("RB_CHANNELS_LAST").is_ok_and(|v| v == "1"),
        "step_ms": (dt * 1e5).round() / 100.0,
        "images_per_s": (batch as f64 / dt).round(),
        "loss": loss,
    }))
}

fn main() {
    let dev = common::cuda_or_exit("cnn");
    match train(&dev, Device::Cuda(0)) {
        Ok(v) => println!("{v}"),
        Err(e) => println!("{}", json!({"bench": "cnn_train", "error": e.to_string()})),
    }
}
