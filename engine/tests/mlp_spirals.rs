//! End to end: an MLP trained with AdamW on the two-spirals set, from a fixed seed, separates
//! the classes, on the training points and on fresh points from another seed.

use rusting_brain::data::spirals::two_spirals;
use rusting_brain::nn::{Activation, Mlp, Module};
use rusting_brain::optim::{AdamW, AdamWConfig, Optimizer, Schedule, StepOutcome};
use rusting_brain::{cross_entropy, no_grad, CrossEntropyOptions, Generator, Result, Tensor};

const STEPS: u64 = 400;

fn accuracy(model: &Mlp, x: &Tensor, y: &Tensor) -> Result<f64> {
    let predicted = no_grad(|| model.forward(x))?.argmax(Some(-1), false)?;
    let hits = predicted.eq(y)?.to_vec::<i64>()?.iter().sum::<i64>();
    Ok(hits as f64 / y.numel() as f64)
}

#[test]
fn mlp_trained_with_adamw_separates_two_spirals() -> Result<()> {
    let mut gen = Generator::new(0);
    let (x, y) = two_spirals(200, 0.02, &mut gen)?;
    let (x_test, y_test) = two_spirals(200, 0.02, &mut Generator::new(1))?;
    let mut model = Mlp::new(&[2, 64, 64, 2], Activation::Tanh, &mut gen)?;
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
        warmup_steps: 20,
        total_steps: STEPS,
    }))?;
    let started = std::time::Instant::now();
    let mut first_loss = None;
    let mut loss_value = f64::NAN;
    for _ in 0..STEPS {
        opt.zero_grad();
        let loss = cross_entropy(&model.forward(&x)?, &y, CrossEntropyOptions::default())?;
        loss.backward()?;
        loss_value = loss.item()?;
        first_loss.get_or_insert(loss_value);
        assert!(matches!(opt.step()?, StepOutcome::Applied { .. }));
    }
    model.eval();
    let (train, test) = (
        accuracy(&model, &x, &y)?,
        accuracy(&model, &x_test, &y_test)?,
    );
    println!(
        "spirals: loss {:.4} -> {loss_value:.4}, train {:.1}%, test {:.1}%, {} steps in {:.2?}",
        first_loss.unwrap_or(f64::NAN),
        100.0 * train,
        100.0 * test,
        STEPS,
        started.elapsed()
    );
    assert!(train >= 0.97, "train accuracy {train}");
    assert!(test >= 0.97, "test accuracy {test}");
    Ok(())
}
