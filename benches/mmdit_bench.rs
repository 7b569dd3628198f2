//! FLUX-shaped blocks on the GPU: diffusers' FluxTransformer2DModel with FLUX.1's width (24
//! heads of 128) and one double-stream and one single-stream block
//! (`benches/diffusion/flux_block.json`, random weights; `diffusion/torch_mmdit_bench.py` reads
//! the same config; run both in one call), at 1024 image tokens (a 512x512 image) and 512 T5
//! tokens: one denoising step (the model's forward, inside one autocast scope over the steps so
//! each weight is cast to BF16 once) and a training step (velocity MSE, backward, AdamW), both
//! under BF16 autocast, with the peak of device memory each held.
//!
//! cargo build --release -p rb_benches --bin mmdit_bench
//! target/release/mmdit_bench --batch 1 --image-tokens 1024 --text-tokens 512 --steps 20
//! `--train-batch 0` skips the training step; `--profile step|train` puts one such step after
//! the warm-up inside the profiler's capture range (for `ncu --profile-from-start off`). Prints
//! one JSON line per measurement; without a usable GPU it prints {"error": ...} and exits 2.

#[path = "common.rs"]
mod common;
#[path = "denoiser_steps.rs"]
mod denoiser_steps;

use rusting_brain::amp::autocast;
use rusting_brain::backend::cuda::CudaDevice;
use rusting_brain::models::diffusion::denoiser::Denoiser;
use rusting_brain::models::diffusion::mmdit::flux::image_ids;
use rusting_brain::models::diffusion::mmdit::{FluxConfig, FluxInputs, FluxTransformer};
use rusting_brain::models::diffusion::prompt_encoder::Conditioning;
use rusting_brain::models::hf_config::Fields;
use rusting_brain::nn::Module;
use rusting_brain::{DType, Device, Generator, Result, Tensor};
use serde_json::json;

struct Inputs {
    x: Tensor,
    context: Tensor,
    pooled: Tensor,
    timesteps: Tensor,
    guidance: Tensor,
    ids: Vec<[f64; 3]>,
}

fn inputs(
    c: &FluxConfig,
    batch: usize,
    image: usize,
    text: usize,
    gen: &mut Generator,
) -> Result<Inputs> {
    let d = Device::Cuda(0);
    let randn = |shape: &[usize], gen: &mut Generator| -> Result<Tensor> {
        Tensor::randn(shape, DType::F32, Some(gen))?.to_device(d)
    };
    // A square grid of 2x2 patches.
    let side = (image as f64).sqrt() as usize;
    Ok(Inputs {
        x: randn(&[batch, side * side, c.in_channels], gen)?,
        context: randn(&[batch, text, c.joint_attention_dim], gen)?,
        pooled: randn(&[batch, c.pooled_projection_dim], gen)?,
        timesteps: Tensor::full(0.5, &[batch], DType::F32, d)?,
        guidance: Tensor::full(3.5, &[batch], DType::F32, d)?,
        ids: image_ids(2 * side, 2 * side),
    })
}

fn predict(model: &FluxTransformer, x: &Inputs) -> Result<Tensor> {
    let inputs = FluxInputs {
        context: &x.context,
        pooled: &x.pooled,
        timesteps: &x.timesteps,
        guidance: Some(&x.guidance),
        image_ids: &x.ids,
    };
    autocast(Some(DType::BF16), || model.predict(&x.x, &inputs))
}

fn run(dev: &CudaDevice) -> Result<Vec<serde_json::Value>> {
    let (batch, train_batch, image, text, steps) = (
        common::num("--batch", 1),
        common::num("--train-batch", 1),
        common::num("--image-tokens", 1024),
        common::num("--text-tokens", 512),
        common::num("--steps", 20),
    );
    let path = format!("{}/diffusion/flux_block.json", env!("CARGO_MANIFEST_DIR"));
    let path = match std::path::Path::new(&path).exists() {
        true => path,
        false => "benches/diffusion/flux_block.json".to_string(),
    };
    let text_json = std::fs::read_to_string(&path)
        .map_err(|e| rusting_brain::Error::invalid("mmdit_bench", format!("{path}: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(&text_json)
        .map_err(|e| rusting_brain::Error::invalid("mmdit_bench", format!("{path}: {e}")))?;
    let config = FluxConfig::read(&Fields::new(&value, "FluxTransformer2DModel"))?;
    let mut gen = Generator::new(0);
    let mut model = FluxTransformer::new(config.clone(), &mut gen)?;
    model.to_device(Device::Cuda(0))?;
    let params: usize = model.parameters().iter().map(Tensor::numel).sum();
    let common = json!({"model": "flux_block", "image_tokens": image, "text_tokens": text, "params": params});
    let mut out = Vec::new();

    model.eval();
    let x = inputs(&config, batch, image, text, &mut gen)?;
    let t = denoiser_steps::sampling(dev, steps, || predict(&model, &x))?;
    out.push(json!({
        "bench": "mmdit_step", "batch": batch, "common": common,
        "step_ms": t.step_ms, "peak_gib": t.peak_gib,
    }));
    // The same step as the pipeline runs it (latents [B, C/4, 2h, 2w], packed inside): captured
    // as one CUDA graph.
    let side = 2 * (image as f64).sqrt() as usize;
    let latents = Tensor::randn(
        &[batch, config.in_channels / 4, side, side],
        DType::F32,
        Some(&mut gen),
    )?
    .to_device(Device::Cuda(0))?;
    let denoiser = Denoiser::Flux(Box::new(model));
    let cond = Conditioning {
        states: x.context.clone(),
        pooled: Some(x.pooled.clone()),
    };
    let t = denoiser_steps::sampling_captured(
        dev,
        steps,
        &denoiser,
        &cond,
        None,
        &latents,
        (500.0, 3.5),
    )?;
    out.push(json!({
        "bench": "mmdit_step_graph", "batch": batch, "common": common,
        "step_ms": t.step_ms, "peak_gib": t.peak_gib,
    }));
    let Denoiser::Flux(model) = denoiser else {
        unreachable!("made a FLUX transformer above")
    };
    let mut model = *model;
    drop((x, cond, latents));

    if train_batch > 0 {
        model.train(true);
        let x = inputs(&config, train_batch, image, text, &mut gen)?;
        let target =
            Tensor::randn(x.x.shape(), DType::F32, Some(&mut gen))?.to_device(Device::Cuda(0))?;
        let (t, loss) = denoiser_steps::training(dev, model.parameters(), &target, steps, || {
            predict(&model, &x)
        })?;
        out.push(json!({
            "bench": "mmdit_train", "batch": train_batch, "common": common,
            "step_ms": t.step_ms, "peak_gib": t.peak_gib, "loss": loss,
        }));
    }
    Ok(out)
}

fn main() {
    let dev = common::cuda_or_exit("mmdit");
    match run(&dev) {
        Ok(lines) => lines.iter().for_each(|v| println!("{v}")),
        Err(e) => println!("{}", json!({"bench": "mmdit", "error": e.to_string()})),
    }
}
