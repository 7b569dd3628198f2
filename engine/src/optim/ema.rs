//! An exponential moving average of a model's whole floating-point state (parameters and
//! buffers such as the batch-norm running statistics), whose decay ramps up over the first
//! updates so the average follows the fast-changing early weights:
//!
//! ```text
//! ema <- lerp(ema, model, 1 - d)                  (= d * ema + (1 - d) * model)
//! ultralytics' ModelEMA:   d = decay * (1 - exp(-updates / tau))      (decay 0.9999, tau 2000)
//! diffusers' EMAModel:     d = min(decay, (1 + s) / (10 + s)), s = updates - 1   (d = 0 at s = 0)
//! ```
//!
//! with updates counted from 1. Integer state (`num_batches_tracked`) is copied once and left
//! alone, as ultralytics skips it. The copies live where the model's tensors do and are
//! updated with tensor ops there; evaluation loads `state()` into a model.

use crate::nn::Module;
use crate::{Error, Result, Tensor};
use std::collections::BTreeMap;

pub const EMA_DECAY: f64 = 0.9999;
pub const EMA_TAU: f64 = 2000.0;

/// How the decay grows with the updates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EmaSchedule {
    /// ultralytics': decay · (1 − exp(−updates / tau)).
    Ramp { decay: f64, tau: f64 },
    /// diffusers' `EMAModel` (no `use_ema_warmup`): min(decay, (1 + s) / (10 + s)) with
    /// s = updates − 1, and 0 at the first update.
    Warmup { decay: f64 },
}

pub struct ModelEma {
    /// Updates so far (saved in checkpoints as ultralytics' `updates`).
    pub updates: u64,
    pub schedule: EmaSchedule,
    /// The averaged state, by state-dict name.
    state: BTreeMap<String, Tensor>,
}

impl ModelEma {
    /// Starts from a copy of the model's state, with no updates, on ultralytics' schedule.
    pub fn new(model: &dyn Module) -> Result<ModelEma> {
        ModelEma::with_schedule(
            model,
            EmaSchedule::Ramp {
                decay: EMA_DECAY,
                tau: EMA_TAU,
            },
        )
    }

    /// Starts from a copy of the model's state, with no updates.
    pub fn with_schedule(model: &dyn Module, schedule: EmaSchedule) -> Result<ModelEma> {
        let bad = match schedule {
            EmaSchedule::Ramp { decay, tau } => !(0.0..1.0).contains(&decay) || tau <= 0.0,
            EmaSchedule::Warmup { decay } => !(0.0..1.0).contains(&decay),
        };
        if bad {
            return Err(Error::invalid(
                "model EMA",
                format!("{schedule:?}: the decay must be in [0, 1) and tau positive"),
            ));
        }
        let state = model
            .state_dict()
            .into_iter()
            .map(|(name, t)| Ok((name, detached_copy(&t)?)))
            .collect::<Result<_>>()?;
        Ok(ModelEma {
            updates: 0,
            schedule,
            state,
        })
    }

    /// The decay of update number `updates`.
    pub fn decay_at(&self, updates: u64) -> f64 {
        match self.schedule {
            EmaSchedule::Ramp { decay, tau } => decay * (1.0 - (-(updates as f64) / tau).exp()),
            EmaSchedule::Warmup { decay } => match updates.saturating_sub(1) {
                0 => 0.0,
                s => decay.min((1.0 + s as f64) / (10.0 + s as f64)),
            },
        }
    }

    /// One update towards the model's current state.
    pub fn update(&mut self, model: &dyn Module) -> Result<()> {
        let current = model.state_dict();
        if current.len() != self.state.len() || current.keys().ne(self.state.keys()) {
            return Err(Error::invalid(
                "model EMA",
                "the model's state names differ from the EMA's",
            ));
        }
        self.updates += 1;
        let weight = 1.0 - self.decay_at(self.updates);
        let (mut xs, mut ends) = (Vec::new(), Vec::new());
        for ((name, ema), model_t) in self.state.iter().zip(current.values()) {
            if !ema.dtype().is_float() {
                continue;
            }
            if ema.shape() != model_t.shape() {
                return Err(Error::invalid(
                    "model EMA",
                    format!(
                        "{name} is {:?} in the model but {:?} in the EMA",
                        model_t.shape(),
                        ema.shape()
                    ),
                ));
            }
            xs.push(ema.clone());
            ends.push(model_t.detach());
        }
        crate::no_grad(|| crate::optim::lerp_all_(&xs, &ends, weight))
    }

    /// The averaged state, by name (a model's `load_state_dict` takes it).
    pub fn state(&self) -> &BTreeMap<String, Tensor> {
        &self.state
    }

    /// Restores a saved average and its update count (a checkpoint's `ema` and `updates`);
    /// the names and shapes must be the EMA's.
    pub fn load_state(&mut self, state: &BTreeMap<String, Tensor>, updates: u64) -> Result<()> {
        let mut problems = Vec::new();
        for (name, t) in &self.state {
            match state.get(name) {
                None => problems.push(format!("missing {name}")),
                Some(s) if s.shape() != t.shape() => problems.push(format!(
                    "{name} is {:?}, expected {:?}",
                    s.shape(),
                    t.shape()
                )),
                Some(_) => {}
            }
        }
        problems.extend(
            state
                .keys()
                .filter(|k| !self.state.contains_key(*k))
                .map(|k| format!("unexpected {k}")),
        );
        if !problems.is_empty() {
            return Err(Error::invalid("model EMA", problems.join("; ")));
        }
        crate::no_grad(|| {
            for (name, t) in &self.state {
                t.copy_(&state[name])?;
            }
            Ok::<(), Error>(())
        })?;
        self.updates = updates;
        Ok(())
    }
}

fn detached_copy(t: &Tensor) -> Result<Tensor> {
    crate::no_grad(|| t.detach().contiguous_copy())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::BatchNorm2d;
    use crate::{DType, Device};

    fn set(t: &Tensor, v: &[f32]) {
        let src = Tensor::from_slice(v, &[v.len()]).unwrap();
        crate::no_grad(|| t.copy_(&src)).unwrap();
    }

    fn values(t: &Tensor) -> Vec<f32> {
        t.to_vec::<f32>().unwrap()
    }

    #[test]
    fn decay_ramps_up_as_ultralytics() {
        // 0.9999 * (1 - exp(-u / 2000)) at u = 1, 2000, 10000.
        let bn = BatchNorm2d::new(2).unwrap();
        let ema = ModelEma::new(&bn).unwrap();
        let want = [
            (1, 0.000499825033328626),
            (2000, 0.6320573467726748),
            (10000, 0.9931627267956145),
        ];
        for (u, d) in want {
            assert!((ema.decay_at(u) - d).abs() < 1e-15, "{u}");
        }
    }

    #[test]
    fn warmup_decay_is_diffusers_ema_models() {
        // diffusers' EMAModel.get_decay at optimization steps 1, 2, 11 and 100000 (decay 0.999).
        let bn = BatchNorm2d::new(2).unwrap();
        let ema = ModelEma::with_schedule(&bn, EmaSchedule::Warmup { decay: 0.999 }).unwrap();
        for (u, d) in [
            (1, 0.0),
            (2, 2.0 / 11.0),
            (11, 11.0 / 20.0),
            (100_000, 0.999),
        ] {
            assert!(
                (ema.decay_at(u) - d).abs() < 1e-15,
                "{u}: {}",
                ema.decay_at(u)
            );
        }
        let err = ModelEma::with_schedule(&bn, EmaSchedule::Warmup { decay: 1.0 });
        assert!(err.is_err());
    }

    #[test]
    fn update_averages_parameters_and_running_stats_as_torch_lerp() {
        // From weight [1, 1] and running_mean [0, 0], two updates towards weight [3, -1] and
        // running_mean [0.5, 0.25]; torch._foreach_lerp_ in float32 gives
        // [2.999000310897827, -0.9990003108978271], [0.4997500777244568, 0.2498750388622284]
        // and then [2.9999990463256836, -0.9999989867210388].
        let bn = BatchNorm2d::new(2).unwrap();
        let mut ema = ModelEma::new(&bn).unwrap();
        set(bn.weight.as_ref().unwrap(), &[3.0, -1.0]);
        set(&bn.running_mean, &[0.5, 0.25]);
        ema.update(&bn).unwrap();
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 2e-7);
        let w = values(&ema.state()["weight"]);
        assert!(close(&w, &[2.999_000_3, -0.999_000_3]), "{w:?}");
        let m = values(&ema.state()["running_mean"]);
        assert!(close(&m, &[0.499_750_08, 0.249_875_04]), "{m:?}");
        ema.update(&bn).unwrap();
        let w = values(&ema.state()["weight"]);
        assert!(close(&w, &[2.999_999, -0.999_999]), "{w:?}");
        assert_eq!(ema.updates, 2);
        // The integer counter is not averaged, and the EMA does not share the model's storage.
        assert_eq!(ema.state()["num_batches_tracked"].dtype(), DType::I64);
        set(bn.weight.as_ref().unwrap(), &[7.0, 7.0]);
        assert!(close(&values(&ema.state()["weight"]), &w));
    }

    #[test]
    fn load_state_restores_values_and_updates_and_refuses_other_names() {
        let bn = BatchNorm2d::new(2).unwrap();
        let mut ema = ModelEma::new(&bn).unwrap();
        let mut saved: BTreeMap<String, Tensor> = ema
            .state()
            .iter()
            .map(|(k, v)| (k.clone(), v.contiguous_copy().unwrap()))
            .collect();
        set(&saved["bias"], &[0.25, 0.5]);
        ema.load_state(&saved, 42).unwrap();
        assert_eq!(values(&ema.state()["bias"]), vec![0.25, 0.5]);
        assert_eq!(ema.updates, 42);
        saved.insert(
            "extra".into(),
            Tensor::zeros(&[1], DType::F32, Device::Cpu).unwrap(),
        );
        let err = ema.load_state(&saved, 1).unwrap_err().to_string();
        assert!(err.contains("unexpected extra"), "{err}");
        assert_eq!(ema.updates, 42);
    }
}
