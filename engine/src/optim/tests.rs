//! Behaviour every optimizer shares: skipping non-finite steps, clipping, schedules, and
//! save -> load -> continue matching an uninterrupted run bit for bit.

use super::*;
use crate::messages::{set_sink, Level};
use crate::nn::{Activation, Mlp, Module};
use crate::{cross_entropy, CrossEntropyOptions, DType, Error, Generator, Tensor};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

fn model(seed: u64) -> Mlp {
    Mlp::new(&[2, 8, 3], Activation::Tanh, &mut Generator::new(seed)).unwrap()
}

/// One forward/backward on a fixed batch chosen by `batch_seed`.
fn backward_on_batch(m: &Mlp, batch_seed: u64) {
    let mut g = Generator::new(batch_seed);
    let x = Tensor::randn(&[6, 2], DType::F32, Some(&mut g)).unwrap();
    let y = Tensor::randint(0, 3, &[6], Some(&mut g)).unwrap();
    let loss = cross_entropy(&m.forward(&x).unwrap(), &y, CrossEntropyOptions::default()).unwrap();
    loss.backward().unwrap();
}

fn train(m: &Mlp, opt: &mut dyn Optimizer, batches: std::ops::Range<u64>) {
    for b in batches {
        opt.zero_grad();
        backward_on_batch(m, b);
        opt.step().unwrap();
    }
}

fn bits(m: &Mlp) -> Vec<u32> {
    m.parameters()
        .iter()
        .flat_map(|p| p.to_vec_f32().unwrap())
        .map(f32::to_bits)
        .collect()
}

/// A state dict as a file round trip would give it: independent copies.
fn copied(state: BTreeMap<String, Tensor>) -> BTreeMap<String, Tensor> {
    state
        .into_iter()
        .map(|(k, t)| (k, t.contiguous_copy().unwrap()))
        .collect()
}

fn make(kind: &str, m: &Mlp) -> Box<dyn Optimizer> {
    let params = m.named_parameters();
    let sched = Schedule::WarmupCosine {
        peak_lr: 0.05,
        min_lr: 0.001,
        warmup_steps: 2,
        total_steps: 8,
    };
    let mut opt: Box<dyn Optimizer> = match kind {
        "adamw" => Box::new(AdamW::named(params, AdamWConfig::default()).unwrap()),
        "adam" => Box::new(
            super::Adam::named(
                params,
                super::AdamConfig {
                    weight_decay: 1e-2,
                    ..Default::default()
                },
            )
            .unwrap(),
        ),
        "rmsprop" => Box::new(
            super::Rmsprop::named(
                params,
                super::RmspropConfig {
                    momentum: 0.9,
                    centered: true,
                    weight_decay: 1e-3,
                    ..Default::default()
                },
            )
            .unwrap(),
        ),
        "sgd" => Box::new(
            Sgd::named(
                params,
                SgdConfig {
                    momentum: 0.9,
                    nesterov: true,
                    weight_decay: 1e-3,
                    ..Default::default()
                },
            )
            .unwrap(),
        ),
        _ => Box::new(
            Lion::named(
                params,
                LionConfig {
                    weight_decay: 0.1,
                    ..Default::default()
                },
            )
            .unwrap(),
        ),
    };
    opt.set_schedule(Some(sched)).unwrap();
    opt.set_max_grad_norm(Some(0.5)).unwrap();
    opt
}

#[test]
fn optimizer_state_save_load_continue_is_bit_identical_to_an_uninterrupted_run() {
    for kind in ["adamw", "adam", "rmsprop", "sgd", "lion"] {
        let straight = model(1);
        let mut opt = make(kind, &straight);
        train(&straight, opt.as_mut(), 0..6);

        let first = model(1);
        let mut opt1 = make(kind, &first);
        train(&first, opt1.as_mut(), 0..3);
        let (weights, state) = (copied(first.state_dict()), opt1.state_dict().unwrap());
        // Keep training the first run: the saved state must not change with it.
        train(&first, opt1.as_mut(), 3..5);

        let resumed = model(99);
        resumed.load_state_dict(&weights, true).unwrap();
        let mut opt2 = make(kind, &resumed);
        opt2.load_state_dict(&state).unwrap();
        assert_eq!(opt2.step_count(), 3);
        train(&resumed, opt2.as_mut(), 3..6);

        assert_eq!(
            bits(&resumed),
            bits(&straight),
            "{kind}: resumed run diverged"
        );
        assert_eq!(opt2.lr(), opt.lr(), "{kind}: schedule position");
    }
}

#[test]
fn optimizer_load_reports_every_bad_entry_and_changes_nothing() {
    let m = model(2);
    let mut opt = make("adamw", &m);
    train(&m, opt.as_mut(), 0..1);
    let mut state = opt.state_dict().unwrap();
    state
        .tensors
        .remove(&param_key("layers.0.weight", "exp_avg"));
    state.tensors.insert(
        param_key("layers.0.bias", "exp_avg_sq"),
        Tensor::zeros(&[3], DType::F32, crate::Device::Cpu).unwrap(),
    );
    state.scalars.insert("bogus".into(), 1.0);

    let mut fresh = make("adamw", &m);
    let msg = match fresh.load_state_dict(&state) {
        Err(Error::StateDict(msg)) => msg,
        other => panic!("expected a StateDict error, got {other:?}"),
    };
    for needle in [
        "missing 1: state.layers.0.weight.exp_avg;",
        "mis-shaped 1: state.layers.0.bias.exp_avg_sq is [3] in the file",
        "unexpected 1: bogus",
    ] {
        assert!(msg.contains(needle), "{needle:?} not in {msg:?}");
    }
    assert_eq!(fresh.step_count(), 0);
    assert!(fresh.core().param_state(0).is_none());

    let mut sgd = make("sgd", &m);
    assert!(sgd.load_state_dict(&opt.state_dict().unwrap()).is_err());
}

#[test]
fn nan_gradient_skips_the_step_leaves_params_unchanged_clears_grads_and_warns() {
    let m = model(3);
    let mut opt = make("adamw", &m);
    train(&m, opt.as_mut(), 0..1);
    let before = bits(&m);
    backward_on_batch(&m, 7);
    let p0 = &m.parameters()[0];
    let g = p0.grad().unwrap();
    let mut poisoned = g.to_vec_f32().unwrap();
    poisoned[0] = f32::NAN;
    p0.set_grad(Some(Tensor::from_vec(poisoned, g.shape()).unwrap()));

    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink_seen = seen.clone();
    let previous = set_sink(Some(Arc::new(move |level, text: &str| {
        if level == Level::Warning {
            sink_seen.lock().unwrap().push(text.to_string());
        }
    })));
    let outcome = opt.step();
    set_sink(previous);

    assert!(matches!(outcome, Ok(StepOutcome::Skipped { norm }) if norm.is_nan()));
    assert_eq!(bits(&m), before);
    assert!(m.parameters().iter().all(|p| p.grad().is_none()));
    assert_eq!(opt.step_count(), 1, "a skipped step does not count");
    assert_eq!(opt.skipped_steps(), 1);
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .any(|t| t.contains("optimizer step 2 skipped")),
        "{:?}",
        seen.lock().unwrap()
    );
}

#[test]
fn max_grad_norm_clips_before_the_update_and_reports_the_pre_clip_norm() {
    let p = Tensor::from_slice(&[0.0f32, 0.0], &[2])
        .unwrap()
        .requires_grad_()
        .unwrap();
    let mut opt = Sgd::new(
        vec![p.clone()],
        SgdConfig {
            lr: 1.0,
            ..Default::default()
        },
    )
    .unwrap();
    opt.set_max_grad_norm(Some(1.0)).unwrap();
    p.set_grad(Some(Tensor::from_slice(&[30.0f32, 40.0], &[2]).unwrap()));
    let outcome = opt.step().unwrap();
    assert!(matches!(outcome, StepOutcome::Applied { grad_norm, .. } if grad_norm == 50.0));
    let v = p.to_vec_f64().unwrap();
    assert!(
        (v[0] + 0.6).abs() < 1e-5 && (v[1] + 0.8).abs() < 1e-5,
        "{v:?}"
    );
}

#[test]
fn a_schedule_sets_the_learning_rate_of_each_step() {
    let p = Tensor::from_slice(&[0.0f32], &[1])
        .unwrap()
        .requires_grad_()
        .unwrap();
    let mut opt = Sgd::new(vec![p.clone()], SgdConfig::default()).unwrap();
    let s = Schedule::WarmupStableDecay {
        peak_lr: 1.0,
        min_lr: 0.0,
        warmup_steps: 2,
        stable_steps: 1,
        decay_steps: 2,
    };
    opt.set_schedule(Some(s)).unwrap();
    let mut lrs = Vec::new();
    for _ in 0..6 {
        p.set_grad(Some(Tensor::from_slice(&[1.0f32], &[1]).unwrap()));
        match opt.step().unwrap() {
            StepOutcome::Applied { lr, .. } => lrs.push(lr),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(lrs, [0.5, 1.0, 1.0, 0.5, 0.0, 0.0]);
    // SGD with unit gradients moves p by the sum of the rates.
    assert!((p.to_vec_f64().unwrap()[0] + 3.0).abs() < 1e-6);
}

#[test]
fn updates_keep_parameter_identity_so_the_module_sees_them() {
    let m = model(4);
    let ids: Vec<usize> = m.parameters().iter().map(|p| p.id()).collect();
    let before = bits(&m);
    let mut opt = make("adamw", &m);
    train(&m, opt.as_mut(), 0..2);
    assert_eq!(
        ids,
        m.parameters().iter().map(|p| p.id()).collect::<Vec<_>>()
    );
    assert_ne!(bits(&m), before);
}

/// Two SGD optimizers (lr 1) over one parameter each, sharing a norm scope of both.
fn scoped_pair() -> (Tensor, Tensor, Sgd, Sgd) {
    let zero = || {
        Tensor::from_slice(&[0.0f32], &[1])
            .unwrap()
            .requires_grad_()
            .unwrap()
    };
    let (p, q) = (zero(), zero());
    let sgd = |t: &Tensor| {
        let cfg = SgdConfig {
            lr: 1.0,
            ..Default::default()
        };
        Sgd::new(vec![t.clone()], cfg).unwrap()
    };
    let (a, b) = (sgd(&p), sgd(&q));
    (p, q, a, b)
}

#[test]
fn optimizers_sharing_a_norm_scope_clip_by_its_norm_and_keep_the_gradients() {
    let (p, q, mut a, mut b) = scoped_pair();
    p.set_grad(Some(Tensor::from_slice(&[3.0f32], &[1]).unwrap()));
    q.set_grad(Some(Tensor::from_slice(&[4.0f32], &[1]).unwrap()));
    let both = [p.clone(), q.clone()];
    let scope = NormScope {
        params: &both,
        max_norm: Some(1.0),
    };
    // The scope's norm is 5, not each optimizer's own 3 or 4: both scale by 1/5.
    for opt in [&mut a, &mut b] {
        let outcome = opt.step_in_scope(scope).unwrap();
        assert!(
            matches!(outcome, StepOutcome::Applied { grad_norm, .. } if grad_norm == 5.0),
            "{outcome:?}"
        );
    }
    assert!((p.to_vec_f64().unwrap()[0] + 0.6).abs() < 1e-5);
    assert!((q.to_vec_f64().unwrap()[0] + 0.8).abs() < 1e-5);
    // The stored gradients are as they were, for the next optimizer of the scope to measure.
    assert_eq!(p.grad().unwrap().to_vec_f64().unwrap(), [3.0]);
    assert_eq!(q.grad().unwrap().to_vec_f64().unwrap(), [4.0]);
}

#[test]
fn a_non_finite_norm_in_the_scope_skips_every_optimizer_of_it() {
    let (p, q, mut a, mut b) = scoped_pair();
    a.core_mut().warn_skips = false;
    b.core_mut().warn_skips = false;
    p.set_grad(Some(Tensor::from_slice(&[1.0f32], &[1]).unwrap()));
    // Only q's gradient is NaN, yet p's optimizer skips too.
    q.set_grad(Some(Tensor::from_slice(&[f32::NAN], &[1]).unwrap()));
    let both = [p.clone(), q.clone()];
    let scope = NormScope {
        params: &both,
        max_norm: Some(10.0),
    };
    for opt in [&mut a, &mut b] {
        let outcome = opt.step_in_scope(scope).unwrap();
        assert!(
            matches!(outcome, StepOutcome::Skipped { .. }),
            "{outcome:?}"
        );
    }
    assert_eq!(p.to_vec_f64().unwrap(), [0.0]);
    assert_eq!((a.skipped_steps(), b.skipped_steps()), (1, 1));
    // Skipping in a scope leaves the gradients to the caller.
    assert!(p.grad().is_some() && q.grad().is_some());
}

/// ZeRO-1 as rank 1 of 2: the step clips by the norm over every parameter (each rank holds
/// every summed gradient) but updates only this rank's own parameters, exactly as an unsharded
/// step does, and keeps state for those alone; the others wait for their owner's broadcast. A
/// loaded state keeps only this rank's share too.
#[test]
fn a_sharded_step_updates_and_keeps_state_for_its_own_parameters_only() {
    let whole = model(1);
    let mut opt = make("adamw", &whole);
    train(&whole, opt.as_mut(), 0..1);

    let initial = model(1);
    let sharded = model(1);
    let mut opt_s = make("adamw", &sharded);
    let sizes: Vec<usize> = sharded.parameters().iter().map(Tensor::numel).collect();
    let shard = crate::dist::zero::StateShard::new(1, 2, &sizes).unwrap();
    opt_s.core_mut().set_shard(shard.clone());
    train(&sharded, opt_s.as_mut(), 0..1);

    let params = |m: &Mlp| -> Vec<Vec<f64>> {
        m.parameters()
            .iter()
            .map(|p| p.to_vec_f64().unwrap())
            .collect()
    };
    let (after, want, before) = (params(&sharded), params(&whole), params(&initial));
    let owned: Vec<bool> = (0..sizes.len()).map(|i| shard.owns(i)).collect();
    assert!(owned.contains(&true) && owned.contains(&false), "{owned:?}");
    for (i, own) in owned.iter().enumerate() {
        let expected = if *own { &want[i] } else { &before[i] };
        assert_eq!(&after[i], expected, "parameter {i} (owned: {own})");
        assert_eq!(opt_s.core().param_state(i).is_some(), *own, "state of {i}");
    }
    opt_s.load_state_dict(&opt.state_dict().unwrap()).unwrap();
    for (i, own) in owned.iter().enumerate() {
        assert_eq!(
            opt_s.core().param_state(i).is_some(),
            *own,
            "loaded state of {i}"
        );
    }
}
