//! A diffusers-shaped UNet2DConditionModel on the GPU (SD 1.5 or SDXL, random weights; the
//! configs are `benches/diffusion/{sd15,sdxl}_unet.json`, which `diffusion/torch_unet_bench.py`
//! reads too; run both in one call): one denoising step (the UNet's forward at one timestep
//! over 77 text states, inside one autocast scope over the steps as a sampling loop runs, so
//! each weight is cast to BF16 once) and a training step (noise-prediction MSE, backward, AdamW), both
//! under BF16 autocast, with the peak of device memory each held.
//!
//! cargo build --release -p rb_benches --bin unet_bench
//! target/release/unet_bench --model sd15 --batch 4 --train-batch 8 --imgsz 512 --steps 10
//! `--train-batch 0` skips the training step. `--profile step` or `--profile train` puts one
//! such step after the warm-up inside the profiler's capture range (for `ncu
//! --profile-from-start off`). Prints one JSON line per measurement; without a usable GPU it
//! prints {"error": ...} and exits 2.

#[path = "common.rs"]
mod common;
#[path = "denoiser_steps.rs"]
mod denoiser_steps;

use rusting_brain::amp::autocast;
use rusting_brain::backend::cuda::CudaDevice;
use rusting_brain::models::diffusion::{AddedConditions, UNet, UNetConfig};
use rusting_brain::nn::Module;
use rusting_brain::{DType, Device, Generator, Result, Tensor};
use serde_json::json;

/// The text states' length: CLIP's 77 tokens.
const TOKENS: usize = 77;

struct Inputs {
    latents: Tensor,
    timesteps: Tensor,
    context: Tensor,
    added: Option<AddedConditions>,
}

fn inputs(c: &UNetConfig, batch: usize, side: usize, gen: &mut Generator) -> Result<Inputs> {
    let d = Device::Cuda(0);
    let randn = |shape: &[usize], gen: &mut Generator| -> Result<Tensor> {
        Tensor::randn(shape, DType::F32, Some(gen))?.to_device(d)
    };
    let added = match c.text_time {
        Some(tt) => Some(AddedConditions {
            text_embeds: randn(&[batch, tt.text_embeds_dim()], gen)?,
            time_ids: Tensor::from_f64s(
                &[1024.0, 1024.0, 0.0, 0.0, 1024.0, 1024.0].repeat(batch),
                &[batch, 6],
                DType::F32,
            )?
            .to_device(d)?,
        }),
        None => None,
    };
    Ok(Inputs {
        latents: randn(&[batch, c.in_channels, side, side], gen)?,
        timesteps: Tensor::full(500.0, &[batch], DType::F32, d)?,
        context: randn(&[batch, TOKENS, c.cross_attention_dim], gen)?,
        added,
    })
}

fn predict(unet: &UNet, x: &Inputs) -> Result<Tensor> {
    autocast(Some(DType::BF16), || {
        unet.predict_with(&x.latents, &x.timesteps, Some(&x.context), x.added.as_ref())
    })
}

fn run(dev: &CudaDevice) -> Result<Vec<serde_json::Value>> {
    let args: Vec<String> = std::env::args().collect();
    let model = args
        .iter()
        .position(|a| a == "--model")
        .and_then(|i| args.get(i + 1))
        .map_or("sd15", String::as_str)
        .to_string();
    let (batch, train_batch, imgsz, steps) = (
        common::num("--batch", 4),
        common::num("--train-batch", 8),
        common::num("--imgsz", 512),
        common::num("--steps", 10),
    );
    let path = format!("{}/diffusion/{model}_unet.json", env!("CARGO_MANIFEST_DIR"));
    let path = match std::path::Path::new(&path).exists() {
        true => path,
        false => format!("benches/diffusion/{model}_unet.json"),
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| rusting_brain::Error::invalid("unet_bench", format!("{path}: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| rusting_brain::Error::invalid("unet_bench", format!("{path}: {e}")))?;
    let config = UNetConfig::from_json(&value)?;
    let side = imgsz / 8;
    let mut gen = Generator::new(0);
    let mut unet = UNet::new(config.clone(), &mut gen)?;
    unet.to_device(Device::Cuda(0))?;
    let params: usize = unet.parameters().iter().map(Tensor::numel).sum();
    let common = json!({"model": model, "imgsz": imgsz, "params": params});
    let mut out = Vec::new();

    unet.eval();
    let x = inputs(&config, batch, side, &mut gen)?;
    let t = denoiser_steps::sampling(dev, steps, || predict(&unet, &x))?;
    out.push(json!({
        "bench": "unet_step", "batch": batch, "common": common,
        "step_ms": t.step_ms, "peak_gib": t.peak_gib,
    }));
    drop(x);

    if train_batch > 0 {
        unet.train(true);
        let x = inputs(&config, train_batch, side, &mut gen)?;
        let target = Tensor::randn(x.latents.shape(), DType::F32, Some(&mut gen))?
            .to_device(Device::Cuda(0))?;
        let (t, loss) = denoiser_steps::training(dev, unet.parameters(), &target, steps, || {
            predict(&unet, &x)
        })?;
        out.push(json!({
            "bench": "unet_train", "batch": train_batch, "common": common,
            "step_ms": t.step_ms, "peak_gib": t.peak_gib, "loss": loss,
        }));
    }
    Ok(out)
}

fn main() {
    let dev = common::cuda_or_exit("unet");
    match run(&dev) {
        Ok(lines) => lines.iter().for_each(|v| println!("{v}")),
        Err(e) => println!("{}", json!({"bench": "unet", "error": e.to_string()})),
    }
}
