//! `optim::ema`: an exponential moving average of a model's weights, for evaluating and saving
//! the averaged model (diffusion and detection training keep one).

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::{self, Api};
use crate::nn::Model;
use rhai::{Engine, Map, INT};
use rusting_brain::optim::{EmaSchedule, ModelEma};
use std::sync::{Arc, Mutex};

/// A shared EMA: copies of the handle update one average.
#[derive(Clone)]
pub struct EmaHandle(Arc<Mutex<ModelEma>>);

impl EmaHandle {
    fn lock(&self) -> std::sync::MutexGuard<'_, ModelEma> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

crate::options! {
    /// `tau` is read by the ultralytics schedule only.
    struct EmaOptions {
        decay: f64 = 0.9999,
        schedule: String = "diffusers".into(),
        tau: f64 = 2000.0,
    }
}

fn ema(model: &mut Model, opts: Map) -> RhaiResult<EmaHandle> {
    let o = EmaOptions::parse("optim::ema", opts)?;
    let schedule = match o.schedule.as_str() {
        "diffusers" => EmaSchedule::Warmup { decay: o.decay },
        "ultralytics" => EmaSchedule::Ramp {
            decay: o.decay,
            tau: o.tau,
        },
        other => {
            return Err(runtime_error(format!(
                "optim::ema: schedule `{other}` is not one of diffusers, ultralytics"
            )))
        }
    };
    let guard_m = model.lock();
    let e = guard(|| ModelEma::with_schedule(&**guard_m, schedule))?;
    Ok(EmaHandle(Arc::new(Mutex::new(e))))
}

pub fn register(engine: &mut Engine, api: &mut Api) {
    engine.register_type_with_name::<EmaHandle>("Ema");
    engine.register_get("updates", |e: &mut EmaHandle| e.lock().updates as INT);
    help::getter(
        "updates",
        "ema.updates -> int",
        "How many updates the average has taken.",
        "let m = nn::linear(2, 2); let e = optim::ema(m); e.update(m); print(e.updates);",
    );
    api.func(
        "ema",
        "optim::ema(model, #{ decay, schedule, tau }) -> Ema",
        "An exponential moving average of the model's weights (and buffers), starting from a copy of them. schedule \"diffusers\" (default) ramps the decay as diffusers' EMAModel, min(decay, (1 + s) / (10 + s)); \"ultralytics\" as ultralytics' ModelEMA, decay (1 - exp(-updates / tau)), tau 2000. decay 0.9999. ema.update(model) after each optimizer step; ema.copy_to(model) loads the average into a model (of the same shape) to sample, evaluate or save it.",
        "let m = nn::linear(2, 2); let e = optim::ema(m, #{ decay: 0.99 }); e.update(m); let avg = nn::linear(2, 2); e.copy_to(avg);",
        ema,
    );
    api.func(
        "ema",
        "optim::ema(model) -> Ema",
        "optim::ema with diffusers' schedule and decay 0.9999.",
        "let m = nn::linear(2, 2); let e = optim::ema(m);",
        |m: &mut Model| ema(m, Map::new()),
    );
    api.method(
        "update",
        "ema.update(model) -> ()",
        "One step of the average towards the model's current weights.",
        "let m = nn::linear(2, 2); let e = optim::ema(m); e.update(m);",
        |e: &mut EmaHandle, m: Model| -> RhaiResult<()> {
            let guard_m = m.lock();
            guard(|| e.lock().update(&**guard_m))
        },
    );
    api.method(
        "copy_to",
        "ema.copy_to(model) -> ()",
        "Loads the averaged weights into a model with the same names and shapes (the trained model itself, or a copy kept for sampling).",
        "let m = nn::linear(2, 2); let e = optim::ema(m); e.copy_to(m);",
        |e: &mut EmaHandle, m: Model| -> RhaiResult<()> {
            let guard_m = m.lock();
            let ema = e.lock();
            guard(|| guard_m.load_state_dict(ema.state(), true).map(|_| ()))
        },
    );
}
