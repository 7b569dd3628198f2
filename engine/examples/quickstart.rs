//! Quickstart: train a small MLP on the two-spirals set with AdamW and a warmup + cosine
//! learning-rate schedule, then report train and test accuracy.
//!
//! cargo run --release --example quickstart -p rusting_brain

use rusting_brain::data::spirals::two_spirals;
use rusting_brain::nn::{Activation, Mlp, Module};
use rusting_brain::optim::{AdamW, AdamWConfig, Optimizer, Schedule, StepOutcome};
use rusting_brain::{cross_entropy, no_grad, CrossEntropyOptions, Generator, Result, Tensor};

const STEPS: u64 = 500;
const PRINT_EVERY: u64 = 50;

/// Fraction of rows whose highest logit is the label.
fn accuracy(model: &Mlp, x: &Tensor, y: &Tensor) -> Result<f64> {
    let predicted = no_grad(|| model.forward(x))?.argmax(Some(-1), false)?;
    let hits = predicted.eq(y)?.to_vec::<i64>()?.iter().sum::<i64>();
    Ok(hits as f64 / y.numel() as f64)
}

fn main() -> Result<()> {
    // One seed for the data and the weights; the test set comes from another seed.
    let mut gen = Generator::new(0);
    let (x_train, y_train) = two_spirals(300, 0.02, &mut gen)?;
    let (x_test, y_test) = two_spirals(300, 0.02, &mut Generator::new(1))?;

    let mut model = Mlp::new(&[2, 64, 64, 2], Activation::Tanh, &mut gen)?;
    println!(
        "MLP 2-64-64-2 (tanh), {} parameters; {} training points",
        model.num_parameters(),
        y_train.numel()
    );
    let mut opt = AdamW::named(
        model.named_parameters(),
        AdamWConfig {
            lr: 0.02,
            weight_decay: 1e-4,
            ..Default::default()
        },
    )?;
    opt.set_schedule(Some(Schedule::WarmupCosine {
        peak_lr: 0.02,
        min_lr: 1e-3,
        warmup_steps: 25,
        total_steps: STEPS,
    }))?;
    opt.set_max_grad_norm(Some(1.0))?;

    let started = std::time::Instant::now();
    for step in 1..=STEPS {
        opt.zero_grad();
        let logits = model.forward(&x_train)?;
        let loss = cross_entropy(&logits, &y_train, CrossEntropyOptions::default())?;
        loss.backward()?;
        let outcome = opt.step()?;
        if step == 1 || step % PRINT_EVERY == 0 {
            match outcome {
                StepOutcome::Applied { lr, grad_norm, .. } => println!(
                    "step {step:4}  loss {:.4}  lr {lr:.5}  grad norm {grad_norm:.3}",
                    loss.item()?
                ),
                StepOutcome::Skipped { norm } => println!("step {step:4}  skipped (norm {norm})"),
                StepOutcome::Queued { lr, grad_norm, .. } => println!(
                    "step {step:4}  loss {:.4}  lr {lr:.5}  grad norm {:.3}",
                    loss.item()?,
                    grad_norm.item()?
                ),
            }
        }
    }
    model.eval();
    println!(
        "train accuracy {:.1}%  test accuracy {:.1}%  ({STEPS} steps in {:.2?})",
        100.0 * accuracy(&model, &x_train, &y_train)?,
        100.0 * accuracy(&model, &x_test, &y_test)?,
        started.elapsed()
    );
    Ok(())
}
