//! The fused CUDA optimizer step against the CPU one: the same parameters and gradients give
//! the same updates, state, clipping and skipped steps. Each test skips without a CUDA device
//! (and fails instead under RB_REQUIRE_CUDA=1).

use rusting_brain::backend::cuda::device_for_test;
use rusting_brain::messages::{set_sink, Level};
use rusting_brain::optim::{
    clip_grad_norm, clip_grad_norm_tensor, global_grad_norm, AdamW, AdamWConfig, Anneal, Lion,
    LionConfig, NormScope, Optimizer, OptimizerState, Schedule, Sgd, SgdConfig, StepOutcome,
};
use rusting_brain::{DType, Device, Generator, Tensor};
use std::sync::{Arc, Mutex};

type Maker = fn(Vec<Tensor>) -> Box<dyn Optimizer>;

/// Values of the given shapes, seeded, scaled.
fn values(shapes: &[Vec<usize>], seed: u64, scale: f32) -> Vec<Vec<f32>> {
    let mut g = Generator::new(seed);
    shapes
        .iter()
        .map(|s| {
            Tensor::randn(s, DType::F32, Some(&mut g))
                .unwrap()
                .to_vec_f32()
                .unwrap()
                .into_iter()
                .map(|x| x * scale)
                .collect()
        })
        .collect()
}

fn params(shapes: &[Vec<usize>], init: &[Vec<f32>], device: Device, dtype: DType) -> Vec<Tensor> {
    shapes
        .iter()
        .zip(init)
        .map(|(s, v)| {
            Tensor::from_vec(v.clone(), s)
                .unwrap()
                .to(device, dtype)
                .unwrap()
                .requires_grad_()
                .unwrap()
        })
        .collect()
}

fn set_grads(ps: &[Tensor], grads: &[Vec<f32>], dtypes: &[DType]) {
    for (i, (p, g)) in ps.iter().zip(grads).enumerate() {
        let dtype = dtypes.get(i).copied().unwrap_or(DType::F32);
        let t = Tensor::from_vec(g.clone(), p.shape())
            .unwrap()
            .to(p.device(), dtype)
            .unwrap();
        p.set_grad(Some(t));
    }
}

/// |a - b| <= tol * max(|b|, 1): relative for values of magnitude one and above.
fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol * b.abs().max(1.0),
            "{what}[{i}]: cuda {a} vs cpu {b}"
        );
    }
}

fn assert_params_close(cuda: &[Tensor], cpu: &[Tensor], tol: f64, what: &str) {
    for (i, (a, b)) in cuda.iter().zip(cpu).enumerate() {
        assert_eq!(a.dtype(), b.dtype());
        assert_close(
            &a.to_vec_f64().unwrap(),
            &b.to_vec_f64().unwrap(),
            tol,
            &format!("{what} param {i}"),
        );
    }
}

fn assert_states_close(cuda: &OptimizerState, cpu: &OptimizerState, tol: f64, what: &str) {
    assert_eq!(
        cuda.scalars.keys().collect::<Vec<_>>(),
        cpu.scalars.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (k, v) in &cpu.scalars {
        let got = cuda.scalars[k];
        assert!(
            (got - v).abs() <= 1e-12 * v.abs().max(1.0),
            "{what}: scalar {k}: cuda {got} vs cpu {v}"
        );
    }
    assert_eq!(
        cuda.tensors.keys().collect::<Vec<_>>(),
        cpu.tensors.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (k, t) in &cpu.tensors {
        let got = &cuda.tensors[k];
        assert_eq!(got.device(), Device::Cpu, "{what}: {k} saved off the host");
        assert_eq!(got.dtype(), t.dtype(), "{what}: {k}");
        assert_close(
            &got.to_vec_f64().unwrap(),
            &t.to_vec_f64().unwrap(),
            tol,
            &format!("{what} {k}"),
        );
    }
}

fn shapes() -> Vec<Vec<usize>> {
    vec![vec![4, 5], vec![5], vec![3, 2, 2], vec![7], vec![1, 1]]
}

/// Runs `steps` on both devices from the same parameters and gradients and compares.
fn compare(
    what: &str,
    make: Maker,
    shapes: &[Vec<usize>],
    steps: u64,
    grad_scale: f32,
    max_norm: Option<f64>,
) {
    let Some(dev) = device_for_test(what) else {
        return;
    };
    let init = values(shapes, 1, 1.0);
    let (pc, pg) = (
        params(shapes, &init, Device::Cpu, DType::F32),
        params(shapes, &init, dev, DType::F32),
    );
    let (mut oc, mut og) = (make(pc.clone()), make(pg.clone()));
    oc.set_max_grad_norm(max_norm).unwrap();
    og.set_max_grad_norm(max_norm).unwrap();
    for step in 1..=steps {
        let grads = values(shapes, 100 + step, grad_scale);
        set_grads(&pc, &grads, &[]);
        set_grads(&pg, &grads, &[]);
        let cpu = oc.step().unwrap();
        let gpu = og.step().unwrap();
        match (cpu, gpu) {
            (
                StepOutcome::Applied {
                    step: s,
                    lr,
                    grad_norm,
                },
                StepOutcome::Queued {
                    step: t,
                    lr: l,
                    grad_norm: n,
                },
            ) => {
                assert_eq!((s, lr), (t, l), "{what}: step and lr");
                assert_eq!((n.device(), n.dtype(), n.rank()), (dev, DType::F32, 0));
                let n = n.item().unwrap();
                assert!(
                    (n - grad_norm).abs() <= 1e-5 * grad_norm,
                    "{what}: norm {n} vs {grad_norm}"
                );
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    assert_params_close(&pg, &pc, 1e-5, what);
    assert_eq!(og.step_count(), steps);
    assert_states_close(
        &og.state_dict().unwrap(),
        &oc.state_dict().unwrap(),
        1e-5,
        what,
    );
}

fn adamw(ps: Vec<Tensor>) -> Box<dyn Optimizer> {
    let cfg = AdamWConfig {
        lr: 1e-2,
        weight_decay: 0.1,
        ..Default::default()
    };
    let mut o = AdamW::new(ps, cfg).unwrap();
    o.set_schedule(Some(Schedule::WarmupCosine {
        peak_lr: 1e-2,
        min_lr: 1e-3,
        warmup_steps: 2,
        total_steps: 5,
    }))
    .unwrap();
    Box::new(o)
}

fn lion(ps: Vec<Tensor>) -> Box<dyn Optimizer> {
    let cfg = LionConfig {
        lr: 1e-3,
        weight_decay: 0.1,
        decay_1d_params: true,
        ..Default::default()
    };
    let mut o = Lion::new(ps, cfg).unwrap();
    o.set_schedule(Some(Schedule::WarmupStableDecay {
        peak_lr: 1e-3,
        min_lr: 0.0,
        warmup_steps: 1,
        stable_steps: 1,
        decay_steps: 3,
    }))
    .unwrap();
    Box::new(o)
}

fn sgd_momentum(ps: Vec<Tensor>) -> Box<dyn Optimizer> {
    let cfg = SgdConfig {
        lr: 0.05,
        momentum: 0.9,
        dampening: 0.1,
        weight_decay: 1e-2,
        ..Default::default()
    };
    Box::new(Sgd::new(ps, cfg).unwrap())
}

fn sgd_nesterov(ps: Vec<Tensor>) -> Box<dyn Optimizer> {
    let cfg = SgdConfig {
        lr: 0.05,
        momentum: 0.9,
        nesterov: true,
        weight_decay: 1e-3,
        ..Default::default()
    };
    Box::new(Sgd::new(ps, cfg).unwrap())
}

/// SGD with momentum under torch's StepLR (halved every 2 steps).
fn sgd_step_schedule(ps: Vec<Tensor>) -> Box<dyn Optimizer> {
    let mut o = sgd_momentum(ps);
    o.set_schedule(Some(Schedule::Step {
        lr: 0.05,
        step_size: 2,
        gamma: 0.5,
    }))
    .unwrap();
    o
}

/// AdamW under a one-cycle curve short enough that both phases run within the test.
fn adamw_one_cycle(ps: Vec<Tensor>, anneal: Anneal) -> Box<dyn Optimizer> {
    let mut o = adamw(ps);
    o.set_schedule(Some(Schedule::OneCycle {
        max_lr: 1e-2,
        total_steps: 6,
        pct_start: 0.5,
        div_factor: 10.0,
        final_div_factor: 100.0,
        anneal,
    }))
    .unwrap();
    o
}

fn sgd_plain(ps: Vec<Tensor>) -> Box<dyn Optimizer> {
    Box::new(
        Sgd::new(
            ps,
            SgdConfig {
                lr: 0.1,
                ..Default::default()
            },
        )
        .unwrap(),
    )
}

#[test]
fn cuda_adamw_matches_cpu() {
    compare("cuda_adamw_matches_cpu", adamw, &shapes(), 5, 0.1, None);
    compare(
        "cuda_adamw_matches_cpu (clipped)",
        adamw,
        &shapes(),
        4,
        1.0,
        Some(1.0),
    );
}

#[test]
fn cuda_lion_matches_cpu() {
    compare("cuda_lion_matches_cpu", lion, &shapes(), 5, 0.1, None);
    compare(
        "cuda_lion_matches_cpu (clipped)",
        lion,
        &shapes(),
        4,
        1.0,
        Some(2.0),
    );
}

/// The device evaluates the step and one-cycle schedules at its own step count as the CPU
/// does: the parameters after each schedule's steps agree.
#[test]
fn cuda_step_and_one_cycle_schedules_match_cpu() {
    compare(
        "cuda_step_schedule_matches_cpu",
        sgd_step_schedule,
        &shapes(),
        5,
        0.5,
        None,
    );
    compare(
        "cuda_one_cycle_cos_matches_cpu",
        |ps| adamw_one_cycle(ps, Anneal::Cos),
        &shapes(),
        7,
        0.5,
        None,
    );
    compare(
        "cuda_one_cycle_linear_matches_cpu",
        |ps| adamw_one_cycle(ps, Anneal::Linear),
        &shapes(),
        7,
        0.5,
        None,
    );
}

#[test]
fn cuda_sgd_momentum_and_nesterov_match_cpu() {
    compare(
        "cuda_sgd_momentum_matches_cpu",
        sgd_momentum,
        &shapes(),
        4,
        0.5,
        None,
    );
    compare(
        "cuda_sgd_nesterov_matches_cpu",
        sgd_nesterov,
        &shapes(),
        4,
        1.0,
        Some(1.5),
    );
    compare(
        "cuda_sgd_plain_matches_cpu",
        sgd_plain,
        &shapes(),
        3,
        1.0,
        None,
    );
}

#[test]
fn cuda_more_tensors_than_one_launch_takes_match_cpu() {
    // 100 small parameters and one large one: several launches of the norm (64 tensors) and
    // of the updates (48), and a tensor of many blocks.
    let mut s: Vec<Vec<usize>> = (0..100)
        .map(|i| {
            if i % 3 == 0 {
                vec![i % 17 + 1, 2]
            } else {
                vec![i % 13 + 1]
            }
        })
        .collect();
    s.push(vec![300, 1000]);
    compare("cuda_many_tensors_adamw", adamw, &s, 3, 0.05, Some(5.0));
    compare("cuda_many_tensors_sgd", sgd_nesterov, &s, 2, 0.05, None);
}

#[test]
fn cuda_f64_params_and_bf16_grads_match_cpu() {
    let Some(dev) = device_for_test("cuda_f64_params_and_bf16_grads_match_cpu") else {
        return;
    };
    let shapes = shapes();
    let init = values(&shapes, 3, 1.0);
    // Parameter dtypes and gradient dtypes, per parameter.
    let pdt = [DType::F64, DType::F32, DType::F64, DType::F32, DType::F32];
    let gdt = [DType::F64, DType::BF16, DType::F32, DType::F16, DType::F32];
    let make = |device| -> Vec<Tensor> {
        shapes
            .iter()
            .zip(&init)
            .zip(pdt)
            .map(|((s, v), dt)| {
                Tensor::from_vec(v.clone(), s)
                    .unwrap()
                    .to(device, dt)
                    .unwrap()
                    .requires_grad_()
                    .unwrap()
            })
            .collect()
    };
    let (pc, pg) = (make(Device::Cpu), make(dev));
    let (mut oc, mut og) = (adamw(pc.clone()), adamw(pg.clone()));
    for step in 1..=3 {
        let grads = values(&shapes, 200 + step, 0.1);
        set_grads(&pc, &grads, &gdt);
        set_grads(&pg, &grads, &gdt);
        oc.step().unwrap();
        og.step().unwrap();
    }
    assert_params_close(&pg, &pc, 1e-5, "mixed dtypes");
    let state = og.state_dict().unwrap();
    assert_eq!(state.tensors["state.0.exp_avg"].dtype(), DType::F64);
    assert_eq!(state.tensors["state.1.exp_avg"].dtype(), DType::F32);
}

#[test]
fn cuda_bf16_params_keep_f32_state_and_track_cpu() {
    let Some(dev) = device_for_test("cuda_bf16_params_keep_f32_state_and_track_cpu") else {
        return;
    };
    let shapes = shapes();
    let init = values(&shapes, 4, 1.0);
    let (pc, pg) = (
        params(&shapes, &init, Device::Cpu, DType::BF16),
        params(&shapes, &init, dev, DType::BF16),
    );
    let make = |ps| {
        Box::new(
            AdamW::new(
                ps,
                AdamWConfig {
                    lr: 1e-2,
                    weight_decay: 0.0,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    };
    let (mut oc, mut og) = (make(pc.clone()), make(pg.clone()));
    for step in 1..=3 {
        let grads = values(&shapes, 300 + step, 0.1);
        set_grads(&pc, &grads, &[DType::BF16; 5]);
        set_grads(&pg, &grads, &[DType::BF16; 5]);
        oc.step().unwrap();
        og.step().unwrap();
    }
    // One bf16 rounding of the same f32 result; an ulp of bf16 is 2^-8 relative.
    assert_params_close(&pg, &pc, 1e-2, "bf16 params");
    let state = og.state_dict().unwrap();
    assert!(state.tensors.values().all(|t| t.dtype() == DType::F32));
    assert_states_close(&state, &oc.state_dict().unwrap(), 1e-5, "bf16 params");
}

/// The message sink is global: tests that install one take turns.
static SINK_TURN: Mutex<()> = Mutex::new(());

/// Collects the warnings that report a skip found on the device.
fn capture_device_skips() -> (
    Arc<Mutex<Vec<String>>>,
    Option<rusting_brain::messages::Sink>,
) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink_seen = seen.clone();
    let previous = set_sink(Some(Arc::new(move |level, text: &str| {
        if level == Level::Warning && text.contains("found on the device") {
            sink_seen.lock().unwrap().push(text.to_string());
        }
    })));
    (seen, previous)
}

#[test]
fn cuda_non_finite_gradient_skips_the_step_on_the_device_and_warns_once_read() {
    let Some(dev) = device_for_test(
        "cuda_non_finite_gradient_skips_the_step_on_the_device_and_warns_once_read",
    ) else {
        return;
    };
    let shapes = shapes();
    let init = values(&shapes, 5, 1.0);
    let (pc, pg) = (
        params(&shapes, &init, Device::Cpu, DType::F32),
        params(&shapes, &init, dev, DType::F32),
    );
    let (mut oc, mut og) = (adamw(pc.clone()), adamw(pg.clone()));
    oc.set_max_grad_norm(Some(1.0)).unwrap();
    og.set_max_grad_norm(Some(1.0)).unwrap();
    let _turn = SINK_TURN.lock().unwrap_or_else(|e| e.into_inner());
    let (seen, previous) = capture_device_skips();
    // Steps 2 and 4 have a NaN and an infinity; the CPU skips them, and so must the device,
    // without the step numbers, bias corrections or schedule drifting afterwards.
    let mut cpu_skips = 0;
    for step in 1..=6u64 {
        let mut grads = values(&shapes, 400 + step, 0.5);
        if step == 2 {
            grads[1][3] = f32::NAN;
        }
        if step == 4 {
            grads[2][0] = f32::INFINITY;
        }
        set_grads(&pc, &grads, &[]);
        set_grads(&pg, &grads, &[]);
        let before: Vec<Vec<f32>> = pg.iter().map(|p| p.to_vec_f32().unwrap()).collect();
        if matches!(oc.step().unwrap(), StepOutcome::Skipped { .. }) {
            cpu_skips += 1;
        }
        assert!(matches!(og.step().unwrap(), StepOutcome::Queued { .. }));
        if step == 2 || step == 4 {
            let after: Vec<Vec<f32>> = pg.iter().map(|p| p.to_vec_f32().unwrap()).collect();
            assert_eq!(after, before, "step {step} changed the parameters");
        }
    }
    assert_eq!(cpu_skips, 2);
    assert_eq!(og.skipped_steps(), 2);
    assert_eq!(og.step_count(), 4);
    set_sink(previous);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen[0].contains("optimizer step 2 skipped: the gradient norm is NaN"),
        "{seen:?}"
    );
    assert!(
        seen[1].contains("optimizer step 3 skipped: the gradient norm is inf"),
        "{seen:?}"
    );
    assert_params_close(&pg, &pc, 1e-5, "after skips");
    assert_states_close(
        &og.state_dict().unwrap(),
        &oc.state_dict().unwrap(),
        1e-5,
        "after skips",
    );
    assert_eq!(og.lr(), oc.lr());
}

#[test]
fn cuda_first_step_skipped_leaves_no_state_behind() {
    let Some(dev) = device_for_test("cuda_first_step_skipped_leaves_no_state_behind") else {
        return;
    };
    let shapes = shapes();
    let init = values(&shapes, 6, 1.0);
    let pg = params(&shapes, &init, dev, DType::F32);
    let mut og = adamw(pg.clone());
    let mut grads = values(&shapes, 500, 0.1);
    grads[0][0] = f32::NAN;
    set_grads(&pg, &grads, &[]);
    let _turn = SINK_TURN.lock().unwrap_or_else(|e| e.into_inner());
    let (seen, previous) = capture_device_skips();
    og.step().unwrap();
    let state = og.state_dict().unwrap();
    drop(og);
    set_sink(previous);
    assert_eq!(seen.lock().unwrap().len(), 1);
    // As on the CPU: no step, no per-parameter state, and the rate from before the step.
    assert_eq!(state.scalars["step"], 0.0);
    assert!(state.tensors.is_empty(), "{:?}", state.tensors.keys());
    assert_eq!(state.scalars["lr"], 1e-2);
}

#[test]
fn cuda_clip_grad_norm_matches_cpu_and_keeps_the_norm_on_the_device() {
    let Some(dev) =
        device_for_test("cuda_clip_grad_norm_matches_cpu_and_keeps_the_norm_on_the_device")
    else {
        return;
    };
    let shapes = shapes();
    let init = values(&shapes, 7, 1.0);
    for (max_norm, poison) in [(1.0, false), (100.0, false), (1.0, true)] {
        let (pc, pg) = (
            params(&shapes, &init, Device::Cpu, DType::F32),
            params(&shapes, &init, dev, DType::F32),
        );
        let mut grads = values(&shapes, 600, 1.0);
        if poison {
            grads[3][1] = f32::NAN;
        }
        set_grads(&pc, &grads, &[]);
        set_grads(&pg, &grads, &[DType::F32, DType::BF16]);
        // The CPU reference sees the gradients the device sees (one of them rounded to bf16).
        set_grads(
            &pc[1..2],
            &[pg[1].grad().unwrap().to_vec_f32().unwrap()],
            &[DType::BF16],
        );
        let want = clip_grad_norm(&pc, max_norm).unwrap();
        let norm = clip_grad_norm_tensor(&pg, max_norm).unwrap();
        assert_eq!(
            (norm.device(), norm.dtype(), norm.rank()),
            (dev, DType::F32, 0)
        );
        let got = norm.item().unwrap();
        if poison {
            assert!(got.is_nan() && want.is_nan());
        } else {
            assert!((got - want).abs() <= 1e-5 * want, "norm {got} vs {want}");
            let (after, cpu_after) = (
                global_grad_norm(&pg).unwrap(),
                global_grad_norm(&pc).unwrap(),
            );
            assert!(
                (after - cpu_after).abs() <= 1e-3 * cpu_after,
                "clipped norm {after} vs {cpu_after}"
            );
        }
        for (i, (a, b)) in pg.iter().zip(&pc).enumerate() {
            let (ga, gb) = (a.grad().unwrap(), b.grad().unwrap());
            assert_eq!(ga.dtype(), gb.dtype());
            let (va, vb) = (ga.to_vec_f64().unwrap(), gb.to_vec_f64().unwrap());
            if poison {
                // A non-finite norm leaves every gradient as it was.
                let same = va
                    .iter()
                    .zip(&vb)
                    .all(|(x, y)| x == y || (x.is_nan() && y.is_nan()));
                assert!(same, "grad {i} changed: {va:?} vs {vb:?}");
                continue;
            }
            let tol = if ga.dtype() == DType::BF16 {
                1e-2
            } else {
                1e-5
            };
            assert_close(&va, &vb, tol, &format!("clipped grad {i}"));
        }
    }
}

#[test]
fn cuda_optimizer_state_saves_to_the_cpu_and_loads_back_onto_the_device() {
    let Some(dev) =
        device_for_test("cuda_optimizer_state_saves_to_the_cpu_and_loads_back_onto_the_device")
    else {
        return;
    };
    let shapes = shapes();
    let init = values(&shapes, 8, 1.0);
    for make in [adamw as Maker, lion, sgd_nesterov] {
        let straight = params(&shapes, &init, dev, DType::F32);
        let mut o = make(straight.clone());
        let first = params(&shapes, &init, dev, DType::F32);
        let mut o1 = make(first.clone());
        for step in 1..=2 {
            let grads = values(&shapes, 700 + step, 0.3);
            set_grads(&straight, &grads, &[]);
            set_grads(&first, &grads, &[]);
            o.step().unwrap();
            o1.step().unwrap();
        }
        let saved = o1.state_dict().unwrap();
        assert!(saved.tensors.values().all(|t| t.device() == Device::Cpu));
        let weights: Vec<Vec<f32>> = first.iter().map(|p| p.to_vec_f32().unwrap()).collect();

        // Resume on the device, and on the CPU, from the saved state.
        let resumed = params(&shapes, &weights, dev, DType::F32);
        let mut o2 = make(resumed.clone());
        o2.load_state_dict(&saved).unwrap();
        assert_eq!(o2.step_count(), 2);
        let on_cpu = params(&shapes, &weights, Device::Cpu, DType::F32);
        let mut o3 = make(on_cpu.clone());
        o3.load_state_dict(&saved).unwrap();
        for step in 3..=4 {
            let grads = values(&shapes, 700 + step, 0.3);
            for ps in [&straight, &resumed, &on_cpu] {
                set_grads(ps, &grads, &[]);
            }
            o.step().unwrap();
            o2.step().unwrap();
            o3.step().unwrap();
        }
        for (a, b) in resumed.iter().zip(&straight) {
            let bits = |t: &Tensor| {
                t.to_vec_f32()
                    .unwrap()
                    .into_iter()
                    .map(f32::to_bits)
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(a), bits(b), "{}: resumed run diverged", o.kind());
        }
        assert_params_close(&resumed, &on_cpu, 1e-5, o.kind());
        assert_eq!(o2.step_count(), 4);
    }
}

#[test]
fn cuda_lerp_all_follows_the_cpu_and_is_exact_at_the_ends() {
    let Some(dev) = device_for_test("cuda_lerp_all_follows_the_cpu") else {
        return;
    };
    // 300 tensors: more than one table (256 a launch), one of them empty, one in BF16.
    let shapes: Vec<Vec<usize>> = (0..300).map(|i| vec![(i * 37) % 5000]).collect();
    let (xs, ends) = (values(&shapes, 1, 1.0), values(&shapes, 2, 3.0));
    // Tensor 7 holds BF16 values: in BF16 on the device, and as the same values in F32 on the
    // CPU, whose result the device's (one rounding to BF16) must then follow.
    let make = |v: &[Vec<f32>], device: Device, bf16: DType| -> Vec<Tensor> {
        v.iter()
            .zip(&shapes)
            .enumerate()
            .map(|(i, (v, s))| {
                let t = Tensor::from_vec(v.clone(), s).unwrap();
                let t = if i == 7 {
                    t.to_dtype(DType::BF16).unwrap().to_dtype(bf16).unwrap()
                } else {
                    t
                };
                t.to_device(device).unwrap()
            })
            .collect()
    };
    for weight in [0.0, 0.3, 0.7, 1.0] {
        let (gx, ge) = (make(&xs, dev, DType::BF16), make(&ends, dev, DType::BF16));
        let (cx, ce) = (
            make(&xs, Device::Cpu, DType::F32),
            make(&ends, Device::Cpu, DType::F32),
        );
        rusting_brain::optim::lerp_all_(&gx, &ge, weight).unwrap();
        rusting_brain::optim::lerp_all_(&cx, &ce, weight).unwrap();
        for (i, (g, c)) in gx.iter().zip(&cx).enumerate() {
            let (g, c) = (g.to_vec_f64().unwrap(), c.to_vec_f64().unwrap());
            let exact = match weight {
                0.0 => Some(make(&xs, Device::Cpu, DType::F32)[i].to_vec_f64().unwrap()),
                1.0 => Some(
                    make(&ends, Device::Cpu, DType::F32)[i]
                        .to_vec_f64()
                        .unwrap(),
                ),
                _ => None,
            };
            match exact {
                Some(want) => assert_eq!(g, want, "weight {weight}: tensor {i} is not exact"),
                // One rounding apart at most (the device fuses the multiply-add; BF16 rounds
                // once to 8 bits).
                None => assert_close(
                    &g,
                    &c,
                    if i == 7 { 4e-3 } else { 1e-6 },
                    &format!("lerp_all_ {i} at {weight}"),
                ),
            }
        }
    }
}

/// Two optimizers (the first two parameters, the rest) stepping in one `NormScope`: clipped by
/// the norm over all five gradients, and a non-finite gradient in one skips both, on the
/// device as on the CPU.
#[test]
fn cuda_optimizers_sharing_a_norm_scope_clip_and_skip_together() {
    let Some(dev) = device_for_test("cuda_optimizers_sharing_a_norm_scope_clip_and_skip_together")
    else {
        return;
    };
    let shapes = shapes();
    let init = values(&shapes, 9, 1.0);
    let (pc, pg) = (
        params(&shapes, &init, Device::Cpu, DType::F32),
        params(&shapes, &init, dev, DType::F32),
    );
    let split = |ps: &[Tensor]| [adamw(ps[..2].to_vec()), sgd_nesterov(ps[2..].to_vec())];
    let (mut oc, mut og) = (split(&pc), split(&pg));
    for step in 1..=4u64 {
        // Norms well above the clip, and a NaN in the second group's gradients at step 3.
        let mut grads = values(&shapes, 900 + step, 4.0);
        if step == 3 {
            grads[3][2] = f32::NAN;
        }
        set_grads(&pc, &grads, &[]);
        set_grads(&pg, &grads, &[]);
        let before: Vec<Vec<f32>> = pg.iter().map(|p| p.to_vec_f32().unwrap()).collect();
        for (opts, ps) in [(&mut oc, &pc), (&mut og, &pg)] {
            let scope = NormScope {
                params: ps,
                max_norm: Some(1.0),
            };
            for o in opts.iter_mut() {
                o.step_in_scope(scope).unwrap();
            }
            for o in opts.iter_mut() {
                o.zero_grad();
            }
        }
        if step == 3 {
            let after: Vec<Vec<f32>> = pg.iter().map(|p| p.to_vec_f32().unwrap()).collect();
            assert_eq!(after, before, "the skipped step changed a parameter");
        }
        assert_params_close(&pg, &pc, 1e-5, &format!("step {step}"));
    }
    for (c, g) in oc.iter().zip(&og) {
        assert_eq!((g.skipped_steps(), g.step_count()), (1, 3));
        assert_eq!((c.skipped_steps(), c.step_count()), (1, 3));
    }
}
