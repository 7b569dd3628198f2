//! A two-layer MLP trains on the GPU, and from the same initial weights its loss curve follows
//! the CPU run: closely in F32, within BF16 tolerance under mixed precision.

use rusting_brain::data::spirals::two_spirals;
use rusting_brain::nn::{Activation, Mlp, Module};
use rusting_brain::optim::{AdamW, AdamWConfig, Optimizer};
use rusting_brain::{
    amp, backend::cuda, cross_entropy, CrossEntropyOptions, DType, Device, Generator, Result,
};

const STEPS: usize = 60;

/// The loss at each step of full-batch AdamW on the spirals, with the model on `device`.
fn loss_curve(device: Device, autocast: Option<DType>) -> Result<Vec<f64>> {
    let mut gen = Generator::new(0);
    let (x, y) = two_spirals(128, 0.02, &mut gen)?;
    let model = Mlp::new(&[2, 64, 2], Activation::Tanh, &mut gen)?;
    model.to_device(device)?;
    let (x, y) = (x.to_device(device)?, y.to_device(device)?);
    let mut opt = AdamW::named(
        model.named_parameters(),
        AdamWConfig {
            lr: 0.02,
            ..Default::default()
        },
    )?;
    let mut losses = Vec::with_capacity(STEPS);
    amp::autocast(autocast, || {
        for _ in 0..STEPS {
            opt.zero_grad();
            let loss = cross_entropy(&model.forward(&x)?, &y, CrossEntropyOptions::default())?;
            loss.backward()?;
            opt.step()?;
            losses.push(loss.item()?);
        }
        Ok(())
    })?;
    for p in model.parameters() {
        assert_eq!(
            p.device(),
            device,
            "parameters stay where the model was moved"
        );
    }
    Ok(losses)
}

fn max_relative_gap(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1e-3))
        .fold(0.0, f64::max)
}

#[test]
fn cuda_mlp_loss_curve_matches_the_cpu_in_f32_and_in_bf16_mixed_precision() -> Result<()> {
    let Some(dev) = cuda::device_for_test(
        "cuda_mlp_loss_curve_matches_the_cpu_in_f32_and_in_bf16_mixed_precision",
    ) else {
        return Ok(());
    };
    let cpu = loss_curve(Device::Cpu, None)?;
    let gpu = loss_curve(dev, None)?;
    let bf16 = loss_curve(dev, Some(DType::BF16))?;
    assert!(
        cpu[STEPS - 1] < cpu[0] - 0.03,
        "the model learns: {} -> {}",
        cpu[0],
        cpu[STEPS - 1]
    );
    let (f32_gap, bf16_gap) = (max_relative_gap(&gpu, &cpu), max_relative_gap(&bf16, &cpu));
    println!(
        "loss {:.4} -> {:.4}; max relative gap to the CPU: f32 {f32_gap:.2e}, bf16 {bf16_gap:.2e}",
        cpu[0],
        cpu[STEPS - 1]
    );
    assert!(
        f32_gap < 1e-3,
        "F32 on CUDA drifts from the CPU by {f32_gap:.2e}\ncpu {cpu:?}\ngpu {gpu:?}"
    );
    assert!(
        bf16_gap < 3e-2,
        "BF16 mixed precision drifts from the CPU by {bf16_gap:.2e}\ncpu {cpu:?}\nbf16 {bf16:?}"
    );
    Ok(())
}
