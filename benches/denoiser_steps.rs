//! What the denoiser benches (unet_bench, mmdit_bench) time the same way: a sampling step
//! inside one autocast scope over the steps (each weight cast to BF16 once, as a sampling loop
//! runs), and a training step (MSE of the BF16-autocast prediction against a target,
//! backward, AdamW). Each runs three warm-up steps, one more inside the profiler's window
//! when `--profile step|train` asks, then `steps` timed; the peak memory is the timed steps'.

use super::common;
use rusting_brain::amp::autocast;
use rusting_brain::backend::cuda::CudaDevice;
use rusting_brain::models::diffusion::denoise_step::DenoiseStep;
use rusting_brain::models::diffusion::denoiser::Denoiser;
use rusting_brain::models::diffusion::prompt_encoder::Conditioning;
use rusting_brain::models::diffusion::AddedConditions;
use rusting_brain::optim::{AdamW, AdamWConfig, Optimizer};
use rusting_brain::{mse_loss, no_grad, DType, Reduction, Result, Tensor};
use rusting_brain::{Device, Error};

/// Milliseconds a step and the peak GiB, to two decimals.
pub struct Timing {
    pub step_ms: f64,
    pub peak_gib: f64,
}

fn timing(dev: &CudaDevice, seconds: f64) -> Result<Timing> {
    Ok(Timing {
        step_ms: (seconds * 1e5).round() / 100.0,
        peak_gib: common::gib(dev.peak_memory()?),
    })
}

fn warm_and_time(
    dev: &CudaDevice,
    what: &str,
    steps: usize,
    mut step: impl FnMut() -> Result<()>,
) -> Result<f64> {
    for _ in 0..3 {
        step()?;
    }
    common::profiled(dev, what, &mut step)?;
    dev.synchronize()?;
    dev.reset_peak_memory()?;
    common::timed(dev, steps, step)
}

/// A sampling step: `predict` without a graph, inside one BF16 autocast scope.
pub fn sampling(
    dev: &CudaDevice,
    steps: usize,
    predict: impl Fn() -> Result<Tensor>,
) -> Result<Timing> {
    let step = || no_grad(&predict).map(drop);
    let seconds = autocast(Some(DType::BF16), || {
        warm_and_time(dev, "step", steps, step)
    })?;
    timing(dev, seconds)
}

/// The pipeline's sampling step (`DenoiseStep`: the latents and the timestep copied into its
/// buffers, the denoiser's call captured as one CUDA graph after the first step) in the same
/// autocast scope. Fails if the step was not captured, so a graph figure is one.
// mmdit_bench's: unet_bench includes this file too, and UNets are not captured.
#[allow(dead_code)]
pub fn sampling_captured(
    dev: &CudaDevice,
    steps: usize,
    denoiser: &Denoiser,
    cond: &Conditioning,
    added: Option<&AddedConditions>,
    latents: &Tensor,
    (t, guidance): (f64, f64),
) -> Result<Timing> {
    let seconds = autocast(Some(DType::BF16), || {
        let mut step = DenoiseStep::new(denoiser, cond, added, guidance, Device::Cuda(0), true)?;
        let seconds = warm_and_time(dev, "graph", steps, || step.predict(latents, t).map(drop))?;
        match step.is_captured() {
            true => Ok(seconds),
            false => Err(Error::invalid(
                "bench",
                "the denoising step was not captured",
            )),
        }
    })?;
    timing(dev, seconds)
}

/// A training step of `params` (AdamW, lr 1e-5, weight decay 0.01): MSE of `predict` (F32)
/// against `target`. Returns the timing and the last loss.
pub fn training(
    dev: &CudaDevice,
    params: Vec<Tensor>,
    target: &Tensor,
    steps: usize,
    predict: impl Fn() -> Result<Tensor>,
) -> Result<(Timing, f64)> {
    let mut opt = AdamW::new(
        params,
        AdamWConfig {
            lr: 1e-5,
            weight_decay: 0.01,
            decay_1d_params: true,
            ..Default::default()
        },
    )?;
    let mut loss = None;
    let step = || -> Result<()> {
        let l = mse_loss(&predict()?.to_dtype(DType::F32)?, target, Reduction::Mean)?;
        l.backward()?;
        opt.step()?;
        opt.zero_grad();
        loss = Some(l);
        Ok(())
    };
    let seconds = warm_and_time(dev, "train", steps, step)?;
    let loss = loss.map(|l| l.item()).transpose()?.unwrap_or(f64::NAN);
    Ok((timing(dev, seconds)?, loss))
}
