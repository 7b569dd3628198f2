//! The learning rates of the step, one-cycle and plateau schedules against
//! torch.optim.lr_scheduler's (`tests/fixtures/schedules/make_schedules.py` wrote them): each
//! runs an SGD optimizer here and compares the rate every step used.

use rusting_brain::optim::{
    Anneal, Optimizer, Plateau, PlateauConfig, PlateauMode, Schedule, Sgd, SgdConfig, StepOutcome,
    ThresholdMode,
};
use rusting_brain::Tensor;
use serde_json::Value;

fn cases() -> Vec<Value> {
    let text = include_str!("../fixtures/schedules/schedules.json");
    let v: Value = serde_json::from_str(text).expect("the schedule fixtures");
    v["cases"].as_array().expect("cases").clone()
}

fn case(name: &str) -> Value {
    cases()
        .into_iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{name} missing from the fixtures"))
}

fn f(c: &Value, key: &str) -> f64 {
    c[key].as_f64().unwrap_or_else(|| panic!("{key}"))
}

fn u(c: &Value, key: &str) -> u64 {
    c[key].as_u64().unwrap_or_else(|| panic!("{key}"))
}

fn floats(c: &Value, key: &str) -> Vec<f64> {
    c[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn sgd(lr: f64) -> Sgd {
    let p = Tensor::zeros(&[2], rusting_brain::DType::F32, rusting_brain::Device::Cpu)
        .unwrap()
        .requires_grad_()
        .unwrap();
    p.set_grad(Some(Tensor::from_slice(&[0.5f32, -0.5], &[2]).unwrap()));
    Sgd::new(
        vec![p],
        SgdConfig {
            lr,
            ..Default::default()
        },
    )
    .unwrap()
}

fn assert_lrs(name: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{name}: steps");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-12 * w.abs().max(1e-3),
            "{name}: step {}: {g} != torch's {w}",
            k + 1
        );
    }
}

/// The rate each of `steps` optimizer steps used under `schedule`.
fn scheduled_lrs(schedule: Schedule, steps: usize) -> Vec<f64> {
    let mut opt = sgd(1.0);
    opt.set_schedule(Some(schedule)).unwrap();
    (0..steps)
        .map(|_| match opt.step().unwrap() {
            StepOutcome::Applied { lr, .. } => lr,
            other => panic!("a CPU step is applied, got {other:?}"),
        })
        .collect()
}

#[test]
fn step_schedule_matches_torch_step_lr() {
    let c = case("step");
    let want = floats(&c, "lrs");
    let s = Schedule::Step {
        lr: f(&c, "lr"),
        step_size: u(&c, "step_size"),
        gamma: f(&c, "gamma"),
    };
    assert_lrs("step", &scheduled_lrs(s, want.len()), &want);
}

#[test]
fn one_cycle_matches_torch_one_cycle_lr_both_anneals() {
    for (name, anneal) in [
        ("onecycle_cos", Anneal::Cos),
        ("onecycle_linear", Anneal::Linear),
    ] {
        let c = case(name);
        let want = floats(&c, "lrs");
        let s = Schedule::OneCycle {
            max_lr: f(&c, "lr"),
            total_steps: u(&c, "total"),
            pct_start: f(&c, "pct_start"),
            div_factor: f(&c, "div_factor"),
            final_div_factor: f(&c, "final_div_factor"),
            anneal,
        };
        assert_lrs(name, &scheduled_lrs(s, want.len()), &want);
    }
}

#[test]
fn plateau_matches_torch_reduce_lr_on_plateau() {
    for name in ["plateau_min_rel", "plateau_max_abs"] {
        let c = case(name);
        let config = PlateauConfig {
            mode: if c["mode"] == "min" {
                PlateauMode::Min
            } else {
                PlateauMode::Max
            },
            factor: f(&c, "factor"),
            patience: u(&c, "patience"),
            threshold: f(&c, "threshold"),
            threshold_mode: if c["threshold_mode"] == "rel" {
                ThresholdMode::Rel
            } else {
                ThresholdMode::Abs
            },
            cooldown: u(&c, "cooldown"),
            min_lr: f(&c, "min_lr"),
            ..Default::default()
        };
        let mut plateau = Plateau::new(config).unwrap();
        let mut opt = sgd(f(&c, "lr"));
        let mut got = Vec::new();
        for m in floats(&c, "metrics") {
            got.push(opt.lr());
            opt.step().unwrap();
            let next = plateau.observe(m, opt.lr());
            opt.set_lr(next).unwrap();
        }
        assert_lrs(name, &got, &floats(&c, "lrs"));
    }
}

#[test]
fn impossible_schedules_are_refused_by_name() {
    let one_cycle = Schedule::OneCycle {
        max_lr: 0.1,
        total_steps: 3,
        pct_start: 0.3,
        div_factor: 25.0,
        final_div_factor: 1e4,
        anneal: Anneal::Cos,
    };
    let err = sgd(0.1).set_schedule(Some(one_cycle)).unwrap_err();
    assert!(err.to_string().contains("one-cycle"), "{err}");
    let step = Schedule::Step {
        lr: 0.1,
        step_size: 0,
        gamma: 0.5,
    };
    let err = sgd(0.1).set_schedule(Some(step)).unwrap_err();
    assert!(err.to_string().contains("step_size"), "{err}");
    let bad = PlateauConfig {
        factor: 1.5,
        ..Default::default()
    };
    assert!(Plateau::new(bad)
        .unwrap_err()
        .to_string()
        .contains("factor"));
}
