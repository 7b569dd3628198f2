//! CLIP ViT-B/32 embeddings on the GPU (transformers' `CLIPConfig()` defaults: a 768-wide,
//! 12-layer vision tower on 224² images in 32² patches, a 512-wide, 12-layer causal text tower
//! over 77 tokens, 512-wide projections), beside `torch_clip_bench.py` (run both in one call):
//! image embeddings per second and text embeddings per second at one batch size, each under
//! BF16 autocast with no grad, random weights, images and token ids (each text ends in the end
//! token, 77 tokens long: the padded length of the longest prompt CLIP takes), with the floor
//! (the products' FLOPs at 790 TFLOP/s).
//!
//! cargo build --release -p rb_benches --bin clip_bench
//! target/release/clip_bench --batch 256 --steps 20
//! Prints one JSON line per measurement; without a usable GPU it prints {"error": ...} and
//! exits 2.

#[path = "common.rs"]
mod common;

use rusting_brain::amp::autocast;
use rusting_brain::models::clip::{Clip, ClipConfig};
use rusting_brain::nn::Module;
use rusting_brain::{no_grad, DType, Device, Generator, Result, Tensor};
use serde_json::json;

const PEAK_TFLOPS: f64 = 790.0;

/// One tower's forward FLOPs for one input of `t` tokens: q, k, v, output and the two MLP
/// products, the two attention products, 2 FLOPs a multiply-add.
fn tower_flops(d: f64, m: f64, layers: f64, t: f64) -> f64 {
    2.0 * layers * (t * (4.0 * d * d + 2.0 * d * m) + 2.0 * t * t * d)
}

/// Seconds a call of `f`, after three warm-up calls.
fn timed(
    dev: &rusting_brain::backend::cuda::CudaDevice,
    steps: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    common::timed(dev, steps, f)
}

fn line(bench: &str, batch: usize, dt: f64, flops: f64) -> serde_json::Value {
    json!({
        "bench": bench, "model": "clip-vit-b32", "batch": batch,
        "step_ms": (dt * 1e5).round() / 100.0, "per_s": (batch as f64 / dt).round(),
        "floor_ms": (batch as f64 * flops / (PEAK_TFLOPS * 1e9) * 100.0).round() / 100.0,
    })
}

fn run(
    dev: &rusting_brain::backend::cuda::CudaDevice,
    d: Device,
) -> Result<Vec<serde_json::Value>> {
    let (batch, steps) = (common::num("--batch", 256), common::num("--steps", 20));
    let config = ClipConfig::from_json(&json!({"text_config": {}, "vision_config": {}}))?;
    let mut gen = Generator::new(0);
    let mut model = Clip::new(config, &mut gen)?;
    model.to_device(d)?;
    model.eval();
    let mut out = Vec::new();

    let images = Tensor::rand(&[batch, 3, 224, 224], DType::F32, Some(&mut gen))?.to_device(d)?;
    let embed_images = || -> Result<()> {
        no_grad(|| autocast(Some(DType::BF16), || model.image_features(&images)))?;
        Ok(())
    };
    let dt = timed(dev, steps, embed_images)?;
    let patch = 2.0 * 49.0 * (32.0 * 32.0 * 3.0) * 768.0;
    let image_flops = patch + tower_flops(768.0, 3072.0, 12.0, 50.0) + 2.0 * 768.0 * 512.0;
    out.push(line("clip_images", batch, dt, image_flops));

    let mut ids = Tensor::randint(0, 49406, &[batch, 77], Some(&mut gen))?.to_vec::<i64>()?;
    for row in ids.chunks_mut(77) {
        row[76] = 49407;
    }
    let ids = Tensor::from_vec(ids, &[batch, 77])?.to_device(d)?;
    let embed_texts = || -> Result<()> {
        no_grad(|| autocast(Some(DType::BF16), || model.text_features(&ids)))?;
        Ok(())
    };
    let dt = timed(dev, steps, embed_texts)?;
    let text_flops = tower_flops(512.0, 2048.0, 12.0, 77.0) + 2.0 * 512.0 * 512.0;
    out.push(line("clip_texts", batch, dt, text_flops));
    Ok(out)
}

fn main() {
    let dev = common::cuda_or_exit("clip");
    match run(&dev, Device::Cuda(0)) {
        Ok(lines) => lines.iter().for_each(|v| println!("{v}")),
        Err(e) => println!("{}", json!({"bench": "clip", "error": e.to_string()})),
    }
}
