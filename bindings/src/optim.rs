//! The `optim::` namespace: optimizers as shared handles, schedules and gradient clipping.

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use rhai::{Array, Dynamic, Engine, Map, Module, FLOAT, INT};
use rusting_brain::optim::{
    Adam, AdamConfig, AdamW, AdamWConfig, Anneal, Lion, LionConfig, Optimizer, Plateau,
    PlateauConfig, PlateauMode, Rmsprop, RmspropConfig, Schedule, Sgd, SgdConfig, StepOutcome,
    ThresholdMode,
};
use rusting_brain::Tensor;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Clone)]
pub struct Optim(Arc<Mutex<Box<dyn Optimizer>>>);

impl Optim {
    pub fn lock(&self) -> MutexGuard<'_, Box<dyn Optimizer>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn params(arr: &Array, what: &str) -> RhaiResult<Vec<Tensor>> {
    crate::convert::tensors(arr, what, "parameter")
}

fn finish(
    mut opt: Box<dyn Optimizer>,
    max_grad_norm: Option<f64>,
    shard_state: bool,
) -> RhaiResult<Optim> {
    if let Some(m) = max_grad_norm {
        guard(|| opt.set_max_grad_norm(Some(m)))?;
    }
    if shard_state {
        guard(|| opt.shard_state())?;
    }
    Ok(Optim(Arc::new(Mutex::new(opt))))
}

crate::options! {
    struct AdamWOptions {
        lr: f64 = AdamWConfig::default().lr,
        betas: (f64, f64) = AdamWConfig::default().betas,
        eps: f64 = AdamWConfig::default().eps,
        weight_decay: f64 = AdamWConfig::default().weight_decay,
        decay_1d_params: bool = AdamWConfig::default().decay_1d_params,
        max_grad_norm: f64,
        shard_state: bool = false,
    }
}

fn adamw(p: Array, opts: Map) -> RhaiResult<Optim> {
    let o = AdamWOptions::parse("optim::adamw", opts)?;
    let c = AdamWConfig {
        lr: o.lr,
        betas: o.betas,
        eps: o.eps,
        weight_decay: o.weight_decay,
        decay_1d_params: o.decay_1d_params,
    };
    let p = params(&p, "optim::adamw")?;
    let opt = guard(|| AdamW::new(p, c))?;
    finish(Box::new(opt), o.max_grad_norm, o.shard_state)
}

crate::options! {
    struct AdamOptions {
        lr: f64 = AdamConfig::default().lr,
        betas: (f64, f64) = AdamConfig::default().betas,
        eps: f64 = AdamConfig::default().eps,
        weight_decay: f64 = AdamConfig::default().weight_decay,
        max_grad_norm: f64,
        shard_state: bool = false,
    }
}

fn adam(p: Array, opts: Map) -> RhaiResult<Optim> {
    let o = AdamOptions::parse("optim::adam", opts)?;
    let c = AdamConfig {
        lr: o.lr,
        betas: o.betas,
        eps: o.eps,
        weight_decay: o.weight_decay,
    };
    let p = params(&p, "optim::adam")?;
    let opt = guard(|| Adam::new(p, c))?;
    finish(Box::new(opt), o.max_grad_norm, o.shard_state)
}

crate::options! {
    struct RmspropOptions {
        lr: f64 = RmspropConfig::default().lr,
        alpha: f64 = RmspropConfig::default().alpha,
        eps: f64 = RmspropConfig::default().eps,
        weight_decay: f64 = RmspropConfig::default().weight_decay,
        momentum: f64 = RmspropConfig::default().momentum,
        centered: bool = RmspropConfig::default().centered,
        max_grad_norm: f64,
        shard_state: bool = false,
    }
}

fn rmsprop(p: Array, opts: Map) -> RhaiResult<Optim> {
    let o = RmspropOptions::parse("optim::rmsprop", opts)?;
    let c = RmspropConfig {
        lr: o.lr,
        alpha: o.alpha,
        eps: o.eps,
        weight_decay: o.weight_decay,
        momentum: o.momentum,
        centered: o.centered,
    };
    let p = params(&p, "optim::rmsprop")?;
    let opt = guard(|| Rmsprop::new(p, c))?;
    finish(Box::new(opt), o.max_grad_norm, o.shard_state)
}

crate::options! {
    struct SgdOptions {
        lr: f64 = SgdConfig::default().lr,
        momentum: f64 = SgdConfig::default().momentum,
        dampening: f64 = SgdConfig::default().dampening,
        nesterov: bool = SgdConfig::default().nesterov,
        weight_decay: f64 = SgdConfig::default().weight_decay,
        max_grad_norm: f64,
        shard_state: bool = false,
    }
}

fn sgd(p: Array, opts: Map) -> RhaiResult<Optim> {
    let o = SgdOptions::parse("optim::sgd", opts)?;
    let c = SgdConfig {
        lr: o.lr,
        momentum: o.momentum,
        dampening: o.dampening,
        nesterov: o.nesterov,
        weight_decay: o.weight_decay,
    };
    let p = params(&p, "optim::sgd")?;
    let opt = guard(|| Sgd::new(p, c))?;
    finish(Box::new(opt), o.max_grad_norm, o.shard_state)
}

crate::options! {
    struct LionOptions {
        lr: f64 = LionConfig::default().lr,
        betas: (f64, f64) = LionConfig::default().betas,
        weight_decay: f64 = LionConfig::default().weight_decay,
        decay_1d_params: bool = LionConfig::default().decay_1d_params,
        max_grad_norm: f64,
        shard_state: bool = false,
    }
}

fn lion(p: Array, opts: Map) -> RhaiResult<Optim> {
    let o = LionOptions::parse("optim::lion", opts)?;
    let c = LionConfig {
        lr: o.lr,
        betas: o.betas,
        weight_decay: o.weight_decay,
        decay_1d_params: o.decay_1d_params,
    };
    let p = params(&p, "optim::lion")?;
    let opt = guard(|| Lion::new(p, c))?;
    finish(Box::new(opt), o.max_grad_norm, o.shard_state)
}

crate::options! {
    /// A learning-rate schedule's options; which keys a kind reads is in its arm below.
    struct ScheduleOptions {
        kind: String = "cosine".into(),
        lr: f64 = 1e-3,
        min_lr: f64 = 0.0,
        warmup: u64 = 0,
        total: u64 = 0,
        stable: u64 = 0,
        decay: u64 = 0,
        step_size: u64 = 0,
        gamma: f64 = 0.1,
        pct_start: f64 = 0.3,
        div_factor: f64 = 25.0,
        final_div_factor: f64 = 1e4,
        anneal: String = "cos".into(),
    }
}

fn schedule(opts: Map) -> RhaiResult<Schedule> {
    let o = ScheduleOptions::parse("schedule", opts)?;
    let lr = o.lr;
    Ok(match o.kind.as_str() {
        "constant" => Schedule::Constant { lr },
        "cosine" => Schedule::WarmupCosine {
            peak_lr: lr,
            min_lr: o.min_lr,
            warmup_steps: o.warmup,
            total_steps: o.total,
        },
        "wsd" => Schedule::WarmupStableDecay {
            peak_lr: lr,
            min_lr: o.min_lr,
            warmup_steps: o.warmup,
            stable_steps: o.stable,
            decay_steps: o.decay,
        },
        "step" => Schedule::Step {
            lr,
            step_size: o.step_size,
            gamma: o.gamma,
        },
        "onecycle" => Schedule::OneCycle {
            max_lr: lr,
            total_steps: o.total,
            pct_start: o.pct_start,
            div_factor: o.div_factor,
            final_div_factor: o.final_div_factor,
            anneal: match o.anneal.as_str() {
                "cos" => Anneal::Cos,
                "linear" => Anneal::Linear,
                other => {
                    return Err(runtime_error(format!(
                        "anneal must be \"cos\" or \"linear\", got \"{other}\""
                    )))
                }
            },
        },
        other => {
            return Err(runtime_error(format!(
                "schedule kind must be \"constant\", \"cosine\", \"wsd\", \"step\" or \"onecycle\", got \"{other}\""
            )))
        }
    })
}

/// A plateau watcher bound to the optimizer whose rate it lowers.
#[derive(Clone)]
pub struct PlateauHandle {
    plateau: Arc<Mutex<Plateau>>,
    opt: Optim,
}

crate::options! {
    struct PlateauOptions {
        mode: String = "min".into(),
        factor: f64 = PlateauConfig::default().factor,
        patience: u64 = PlateauConfig::default().patience,
        threshold: f64 = PlateauConfig::default().threshold,
        threshold_mode: String = "rel".into(),
        cooldown: u64 = PlateauConfig::default().cooldown,
        min_lr: f64 = PlateauConfig::default().min_lr,
        eps: f64 = PlateauConfig::default().eps,
    }
}

/// `value` as the first choice (`a`) or the second (`b`), or an error naming both.
fn choice(key: &str, value: &str, a: &str, b: &str) -> RhaiResult<bool> {
    if value == a || value == b {
        return Ok(value == a);
    }
    Err(runtime_error(format!(
        "optim::plateau: {key} must be \"{a}\" or \"{b}\", got \"{value}\""
    )))
}

fn plateau(opt: Optim, opts: Map) -> RhaiResult<PlateauHandle> {
    let o = PlateauOptions::parse("optim::plateau", opts)?;
    let config = PlateauConfig {
        mode: if choice("mode", &o.mode, "min", "max")? {
            PlateauMode::Min
        } else {
            PlateauMode::Max
        },
        factor: o.factor,
        patience: o.patience,
        threshold: o.threshold,
        threshold_mode: if choice("threshold_mode", &o.threshold_mode, "rel", "abs")? {
            ThresholdMode::Rel
        } else {
            ThresholdMode::Abs
        },
        cooldown: o.cooldown,
        min_lr: o.min_lr,
        eps: o.eps,
    };
    if opt.lock().core().schedule.is_some() {
        return Err(runtime_error(
            "optim::plateau sets the optimizer's rate itself; this optimizer has a schedule \
             (opt.set_schedule), which would override it at every step",
        ));
    }
    let p = guard(|| Plateau::new(config))?;
    Ok(PlateauHandle {
        plateau: Arc::new(Mutex::new(p)),
        opt,
    })
}

/// Feeds one value of the watched metric; returns the rate the optimizer has from now on.
fn plateau_step(p: &mut PlateauHandle, metric: FLOAT) -> RhaiResult<FLOAT> {
    let mut opt = p.opt.lock();
    let mut plateau = p.plateau.lock().unwrap_or_else(|e| e.into_inner());
    let lr = plateau.observe(metric, opt.lr());
    guard(|| opt.set_lr(lr))?;
    Ok(lr)
}

fn outcome(o: StepOutcome) -> Map {
    let mut m = Map::new();
    match o {
        StepOutcome::Applied {
            step,
            lr,
            grad_norm,
        } => {
            m.insert("applied".into(), Dynamic::TRUE);
            m.insert("step".into(), Dynamic::from_int(step as INT));
            m.insert("lr".into(), Dynamic::from_float(lr));
            m.insert("grad_norm".into(), Dynamic::from_float(grad_norm));
        }
        StepOutcome::Skipped { norm } => {
            m.insert("applied".into(), Dynamic::FALSE);
            m.insert("grad_norm".into(), Dynamic::from_float(norm));
        }
        // Queued on a CUDA device, which skips it there if the norm is not finite (warned about
        // once read back); the norm stays a 0-d device tensor so the step never waits.
        StepOutcome::Queued {
            step,
            lr,
            grad_norm,
        } => {
            m.insert("applied".into(), Dynamic::TRUE);
            m.insert("queued".into(), Dynamic::TRUE);
            m.insert("step".into(), Dynamic::from_int(step as INT));
            m.insert("lr".into(), Dynamic::from_float(lr));
            m.insert("grad_norm".into(), Dynamic::from(grad_norm));
        }
    }
    m
}

pub fn register(engine: &mut Engine) {
    engine.register_type_with_name::<Optim>("Optimizer");
    engine.register_type_with_name::<PlateauHandle>("Plateau");
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("optim"));
        crate::ema::register(engine, &mut api);
        let (a, sg, li) = (
            AdamWConfig::default(),
            SgdConfig::default(),
            LionConfig::default(),
        );
        let adamw_doc = format!("AdamW with decoupled weight decay (not on 1-D params unless asked). Defaults: lr {}, betas ({}, {}), eps {}, weight_decay {}, decay_1d_params {}, no max_grad_norm, shard_state false. shard_state: true is ZeRO-1 under `brain launch`: each rank keeps the state of its share of the parameters (about 1/world_size of the memory), updates those and broadcasts them; every rank must then save checkpoints together.", a.lr, a.betas.0, a.betas.1, a.eps, a.weight_decay, a.decay_1d_params);
        let sgd_doc = format!("SGD with optional (Nesterov) momentum. Defaults: lr {}, momentum {}, dampening {}, nesterov {}, weight_decay {}, no max_grad_norm, shard_state false.", sg.lr, sg.momentum, sg.dampening, sg.nesterov, sg.weight_decay);
        let lion_doc = format!("Lion: sign of an interpolated momentum. Defaults: lr {}, betas ({}, {}), weight_decay {}, decay_1d_params {}, no max_grad_norm, shard_state false.", li.lr, li.betas.0, li.betas.1, li.weight_decay, li.decay_1d_params);
        api.func("adamw", "optim::adamw(params, #{ lr, betas, eps, weight_decay, decay_1d_params, max_grad_norm, shard_state }) -> Optimizer", &adamw_doc, "let model = nn::linear(4, 2); let opt = optim::adamw(model.parameters(), #{ lr: 3e-4, weight_decay: 0.1 });", adamw);
        api.func("adam", "optim::adam(params, #{ lr, betas, eps, weight_decay, max_grad_norm, shard_state }) -> Optimizer", "Adam as torch.optim.Adam: weight_decay (default 0) is L2 added to the gradient of every parameter; for decoupled decay use optim::adamw.", "let model = nn::linear(4, 2); let opt = optim::adam(model.parameters(), #{ lr: 1e-3 });", adam);
        api.func("rmsprop", "optim::rmsprop(params, #{ lr, alpha, eps, weight_decay, momentum, centered, max_grad_norm, shard_state }) -> Optimizer", "RMSprop as torch.optim.RMSprop (defaults lr 1e-2, alpha 0.99, eps 1e-8); centered divides by the gradient's running variance instead of its mean square.", "let model = nn::linear(4, 2); let opt = optim::rmsprop(model.parameters(), #{ lr: 1e-3, momentum: 0.9 });", rmsprop);
        api.func("sgd", "optim::sgd(params, #{ lr, momentum, dampening, nesterov, weight_decay, max_grad_norm, shard_state }) -> Optimizer", &sgd_doc, "let model = nn::linear(4, 2); let opt = optim::sgd(model.parameters(), #{ lr: 0.1, momentum: 0.9 });", sgd);
        api.func("lion", "optim::lion(params, #{ lr, betas, weight_decay, decay_1d_params, max_grad_norm, shard_state }) -> Optimizer", &lion_doc, "let model = nn::linear(4, 2); let opt = optim::lion(model.parameters(), #{ lr: 1e-4 });", lion);
        api.func("clip_grad_norm", "optim::clip_grad_norm(params, max_norm) -> float", "Scales gradients so their global norm is at most max_norm; returns the norm before clipping.", "let model = nn::linear(4, 2); model.forward(randn([3, 4])).sum().backward(); let norm = optim::clip_grad_norm(model.parameters(), 1.0);", |p: Array, m: FLOAT| {
            let p = params(&p, "optim::clip_grad_norm")?;
            guard(|| rusting_brain::optim::clip_grad_norm(&p, m))
        });
        api.method("step", "opt.step() -> map", "Updates the parameters from their gradients; returns #{ applied, step, lr, grad_norm }. A non-finite gradient norm skips the step and clears the gradients.", "let model = nn::linear(4, 2); let opt = optim::sgd(model.parameters(), #{ lr: 0.1 }); model.forward(randn([3, 4])).sum().backward(); let info = opt.step();", |o: &mut Optim| guard(|| o.lock().step()).map(outcome));
        api.method(
            "zero_grad",
            "opt.zero_grad()",
            "Clears the gradients of the optimizer's parameters.",
            "let model = nn::linear(4, 2); let opt = optim::sgd(model.parameters(), #{ lr: 0.1 }); opt.zero_grad();",
            |o: &mut Optim| o.lock().zero_grad(),
        );
        api.method(
            "lr",
            "opt.lr() -> float",
            "The current learning rate.",
            "let model = nn::linear(4, 2); let opt = optim::adamw(model.parameters(), #{ lr: 1e-3 }); print(opt.lr())",
            |o: &mut Optim| o.lock().lr(),
        );
        api.method(
            "set_lr",
            "opt.set_lr(lr)",
            "Sets the learning rate (a schedule overrides it each step).",
            "let model = nn::linear(4, 2); let opt = optim::adamw(model.parameters(), #{ lr: 1e-3 }); opt.set_lr(1e-4);",
            |o: &mut Optim, lr: FLOAT| guard(|| o.lock().set_lr(lr)),
        );
        api.method("set_schedule", "opt.set_schedule(#{ kind, lr, min_lr, warmup, total, stable, decay, step_size, gamma, pct_start, div_factor, final_div_factor, anneal })", "Learning-rate schedule per optimizer step: \"constant\"; \"cosine\" (warmup + cosine: lr, min_lr, warmup, total); \"wsd\" (warmup-stable-decay: lr, min_lr, warmup, stable, decay); \"step\" (torch's StepLR in steps: lr times gamma (0.1) every step_size steps); \"onecycle\" (torch's OneCycleLR without momentum cycling: lr is max_lr, total, pct_start 0.3, div_factor 25, final_div_factor 1e4, anneal \"cos\" or \"linear\"). Runs inside the fused CUDA update too.", "let model = nn::linear(4, 2); let opt = optim::adamw(model.parameters(), #{}); opt.set_schedule(#{ kind: \"cosine\", lr: 1e-3, warmup: 100, total: 2000 });", |o: &mut Optim, m: Map| {
            let s = schedule(m)?;
            guard(|| o.lock().set_schedule(Some(s)))
        });
        api.func("plateau", "optim::plateau(opt, #{ mode, factor, patience, threshold, threshold_mode, cooldown, min_lr, eps }) -> Plateau", "torch's ReduceLROnPlateau: p.step(metric) after each evaluation multiplies the optimizer's rate by factor once the metric has not improved for more than patience evaluations. Defaults: mode \"min\" (or \"max\"), factor 0.1, patience 10, threshold 1e-4, threshold_mode \"rel\" (or \"abs\"), cooldown 0, min_lr 0, eps 1e-8. Not with a schedule.", "let model = nn::linear(4, 2); let opt = optim::sgd(model.parameters(), #{ lr: 0.1 }); let p = optim::plateau(opt, #{ patience: 2 }); let lr = p.step(0.5);", plateau);
        api.method("step", "p.step(metric) -> float", "Feeds one value of the watched metric (e.g. the validation loss); returns the optimizer's rate from now on.", "let model = nn::linear(4, 2); let opt = optim::sgd(model.parameters(), #{ lr: 0.1 }); let p = optim::plateau(opt, #{ patience: 0 }); p.step(1.0); let lr = p.step(2.0);", plateau_step);
    }
    engine.register_static_module("optim", module.into());
}
