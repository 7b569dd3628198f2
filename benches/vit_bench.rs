//! ViT-B/16 on the GPU (transformers' `ViTForImageClassification` shape, 1000 classes),
//! beside `torch_vit_bench.py` (run both in one call): inference images per second at one
//! batch size, and a training step (forward, cross-entropy, backward, AdamW) at another, both
//! under BF16 autocast on random images and labels, with the floor (the products' FLOPs at
//! 790 TFLOP/s).
//!
//! cargo build --release -p rb_benches --bin vit_bench
//! target/release/vit_bench --infer-batch 256 --train-batch 128 --steps 20
//! `--profile` puts one training step after the warm-up inside the profiler's capture range.
//! Prints one JSON line per measurement; without a usable GPU it prints {"error": ...} and
//! exits 2.

#[path = "common.rs"]
mod common;

use rusting_brain::amp::autocast;
use rusting_brain::models::vit::{HeadKind, ViT, ViTConfig};
use rusting_brain::nn::Module;
use rusting_brain::optim::{AdamW, AdamWConfig, Optimizer};
use rusting_brain::{
    cross_entropy, no_grad, CrossEntropyOptions, DType, Device, Generator, Result, Tensor,
};
use serde_json::json;

/// Forward FLOPs of one image: the products (q, k, v, output, two MLP layers) and the two
/// attention products, 2 FLOPs a multiply-add.
fn forward_flops(c: &ViTConfig, imgsz: usize) -> f64 {
    let (d, m, l) = (
        c.hidden_size as f64,
        c.intermediate_size as f64,
        c.num_hidden_layers as f64,
    );
    let t = ((imgsz / c.patch_size).pow(2) + 1) as f64;
    let patch = (c.patch_size * c.patch_size * c.num_channels) as f64 * d * (t - 1.0);
    let per_layer = t * (4.0 * d * d + 2.0 * d * m) + 2.0 * t * t * d;
    2.0 * (patch + l * per_layer)
}

const PEAK_TFLOPS: f64 = 790.0;

fn run(
    dev: &rusting_brain::backend::cuda::CudaDevice,
    d: Device,
) -> Result<Vec<serde_json::Value>> {
    let (infer_batch, train_batch, steps, size) = (
        common::num("--infer-batch", 256),
        common::num("--train-batch", 128),
        common::num("--steps", 20),
        common::num("--imgsz", 224),
    );
    let config = ViTConfig {
        labels: (0..1000).map(|i| format!("LABEL_{i}")).collect(),
        image_size: size,
        ..ViTConfig::default()
    };
    let flops = forward_flops(&config, size);
    let mut gen = Generator::new(0);
    let mut model = ViT::new(config, HeadKind::Classifier, &mut gen)?;
    model.to_device(d)?;
    let mut out = Vec::new();

    model.eval();
    let x =
        Tensor::rand(&[infer_batch, 3, size, size], DType::F32, Some(&mut gen))?.to_device(d)?;
    let infer = || -> Result<()> {
        no_grad(|| autocast(Some(DType::BF16), || model.forward(&x)))?;
        Ok(())
    };
    for _ in 0..3 {
        infer()?;
    }
    let dt = common::timed(dev, steps, infer)?;
    let floor = infer_batch as f64 * flops / (PEAK_TFLOPS * 1e12);
    out.push(json!({
        "bench": "vit_infer", "model": "vit-b16", "batch": infer_batch, "imgsz": size,
        "step_ms": (dt * 1e5).round() / 100.0, "images_per_s": (infer_batch as f64 / dt).round(),
        "floor_ms": (floor * 1e5).round() / 100.0,
        "tflops": (infer_batch as f64 * flops / dt / 1e10).round() / 100.0,
    }));

    model.train(true);
    let mut opt = AdamW::new(
        model.parameters(),
        AdamWConfig {
            lr: 1e-4,
            weight_decay: 0.05,
            // torch.optim.AdamW decays every parameter.
            decay_1d_params: true,
            ..Default::default()
        },
    )?;
    let x =
        Tensor::rand(&[train_batch, 3, size, size], DType::F32, Some(&mut gen))?.to_device(d)?;
    let y = Tensor::randint(0, 1000, &[train_batch], Some(&mut gen))?.to_device(d)?;
    let mut loss = None;
    let mut step = || -> Result<()> {
        let l = autocast(Some(DType::BF16), || {
            cross_entropy(&model.forward(&x)?, &y, CrossEntropyOptions::default())
        })?;
        l.backward()?;
        opt.step()?;
        opt.zero_grad();
        loss = Some(l);
        Ok(())
    };
    for _ in 0..5 {
        step()?;
    }
    if std::env::args().any(|a| a == "--profile") {
        dev.synchronize()?;
        dev.profiler_capture(true)?;
        step()?;
        dev.synchronize()?;
        dev.profiler_capture(false)?;
    }
    let dt = common::timed(dev, steps, &mut step)?;
    let floor = 3.0 * train_batch as f64 * flops / (PEAK_TFLOPS * 1e12);
    let loss = loss.map(|l| l.item()).transpose()?.unwrap_or(f64::NAN);
    out.push(json!({
        "bench": "vit_train", "model": "vit-b16", "batch": train_batch, "imgsz": size,
        "step_ms": (dt * 1e5).round() / 100.0, "images_per_s": (train_batch as f64 / dt).round(),
        "floor_ms": (floor * 1e5).round() / 100.0,
        "tflops": (3.0 * train_batch as f64 * flops / dt / 1e10).round() / 100.0, "loss": loss,
    }));
    Ok(out)
}

fn main() {
    let dev = common::cuda_or_exit("vit");
    match run(&dev, Device::Cuda(0)) {
        Ok(lines) => lines.iter().for_each(|v| println!("{v}")),
        Err(e) => println!("{}", json!({"bench": "vit", "error": e.to_string()})),
    }
}
