//! The per-iteration learning rates, momentum and gradient accumulation of ultralytics'
//! detection training (8.4.190, `BaseTrainer._do_train`):
//!
//! - `lf(epoch) = max(1 - epoch / epochs, 0) * (1 - lrf) + lrf`, the linear decay (cos_lr off);
//!   after warmup every group trains at `lr0 * lf(epoch)`.
//! - Warmup lasts `round(min(warmup_epochs, epochs - 1) * batches_per_epoch)` iterations (none
//!   when that is 0). For iteration `ni <= warmup` the rates are interpolated linearly (numpy's
//!   `interp`) from `warmup_bias_lr` (bias group) or 0 (the others) up to `lr0 * lf(epoch)`,
//!   the momentum from `warmup_momentum` to `momentum`, and the accumulation from 1 to its
//!   nominal `max(round(nbs / batch), 1)` (capped at the run's total batches).
//! - An optimizer step happens at iteration `ni` when `ni - last_step >= accumulate`, with
//!   `last_step` starting at -1.
//!
//! 8.4.190 has no 100-iteration floor on the warmup (older releases had
//! `max(round(warmup_epochs * nb), 100)`), and it ramps the accumulation during warmup.

use crate::{Error, Result};

/// The settings the schedule reads, with ultralytics' defaults (cfg/default.yaml).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScheduleConfig {
    pub lr0: f64,
    pub lrf: f64,
    pub momentum: f64,
    pub warmup_epochs: f64,
    pub warmup_momentum: f64,
    pub warmup_bias_lr: f64,
    pub nbs: usize,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig {
            lr0: 0.01,
            lrf: 0.01,
            momentum: 0.937,
            warmup_epochs: 3.0,
            warmup_momentum: 0.8,
            warmup_bias_lr: 0.1,
            nbs: 64,
        }
    }
}

/// What one iteration trains with. `lrs` are in ultralytics' group order: decayed weights
/// (pg0), norm weights (pg1), biases (pg2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IterationSettings {
    pub lrs: [f64; 3],
    /// SGD's momentum. ultralytics only warms a group's `momentum` key, which Adam-family
    /// groups do not have (their beta1 stays fixed), so AdamW ignores this.
    pub momentum: f64,
    /// Batches whose gradients add up before a step.
    pub accumulate: usize,
}

/// The schedule of one run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainSchedule {
    pub config: ScheduleConfig,
    pub epochs: usize,
    pub batches_per_epoch: usize,
    /// Warmup iterations (0: no warmup).
    pub warmup_iterations: usize,
    /// The accumulation after warmup.
    pub nominal_accumulate: usize,
}

impl TrainSchedule {
    pub fn new(
        config: ScheduleConfig,
        epochs: usize,
        batches_per_epoch: usize,
        batch_size: usize,
    ) -> Result<TrainSchedule> {
        if epochs == 0 || batches_per_epoch == 0 || batch_size == 0 || config.nbs == 0 {
            return Err(Error::invalid(
                "yolo schedule",
                format!(
                    "epochs ({epochs}), batches per epoch ({batches_per_epoch}), batch size \
                     ({batch_size}) and nbs ({}) must all be positive",
                    config.nbs
                ),
            ));
        }
        if !(config.warmup_epochs >= 0.0 && config.lr0 >= 0.0 && config.lrf >= 0.0) {
            return Err(Error::invalid(
                "yolo schedule",
                "warmup_epochs, lr0 and lrf must be >= 0",
            ));
        }
        let nominal_accumulate =
            accumulate_for(config.nbs, batch_size).min(batches_per_epoch * epochs);
        Ok(TrainSchedule {
            config,
            epochs,
            batches_per_epoch,
            warmup_iterations: warmup_iterations(config.warmup_epochs, epochs, batches_per_epoch),
            nominal_accumulate,
        })
    }

    /// The learning-rate factor of `epoch` (from 0).
    pub fn lf(&self, epoch: usize) -> f64 {
        linear_lf(epoch, self.epochs, self.config.lrf)
    }

    /// The settings of global iteration `ni = batch + batches_per_epoch * epoch`. After warmup
    /// the momentum is `momentum` and the accumulation its nominal value, as warmup leaves
    /// them.
    pub fn at(&self, ni: usize) -> IterationSettings {
        let c = &self.config;
        let epoch = ni / self.batches_per_epoch;
        let target = c.lr0 * self.lf(epoch);
        let nw = self.warmup_iterations;
        if nw == 0 || ni > nw {
            return IterationSettings {
                lrs: [target; 3],
                momentum: c.momentum,
                accumulate: self.nominal_accumulate,
            };
        }
        let (x, end) = (ni as f64, nw as f64);
        let ramp = |from: f64, to: f64| interp(x, end, from, to);
        let accumulate = ramp(1.0, self.nominal_accumulate as f64).round_ties_even();
        IterationSettings {
            lrs: [
                ramp(0.0, target),
                ramp(0.0, target),
                ramp(c.warmup_bias_lr, target),
            ],
            momentum: ramp(c.warmup_momentum, c.momentum),
            accumulate: (accumulate as usize).max(1),
        }
    }
}

/// `max(round(nbs / batch), 1)`, Python's round (ties to even).
pub fn accumulate_for(nbs: usize, batch_size: usize) -> usize {
    ((nbs as f64 / batch_size.max(1) as f64).round_ties_even() as usize).max(1)
}

/// `round(min(warmup_epochs, max(epochs - 1, 0)) * batches_per_epoch)`: warmup always leaves
/// the last epoch to regular training.
pub fn warmup_iterations(warmup_epochs: f64, epochs: usize, batches_per_epoch: usize) -> usize {
    let epochs_allowed = warmup_epochs.min(epochs.saturating_sub(1) as f64);
    if epochs_allowed > 0.0 {
        (epochs_allowed * batches_per_epoch as f64).round_ties_even() as usize
    } else {
        0
    }
}

/// ultralytics' linear decay: `max(1 - epoch / epochs, 0) * (1 - lrf) + lrf`.
pub fn linear_lf(epoch: usize, epochs: usize, lrf: f64) -> f64 {
    (1.0 - epoch as f64 / epochs as f64).max(0.0) * (1.0 - lrf) + lrf
}

/// Whether iteration `ni` steps the optimizer: `ni - last_step >= accumulate`, where
/// `last_step` is the iteration of the previous step (`None` before the first, ultralytics' -1).
pub fn steps_at(ni: usize, last_step: Option<usize>, accumulate: usize) -> bool {
    let since = match last_step {
        Some(last) => ni as i64 - last as i64,
        None => ni as i64 + 1,
    };
    since >= accumulate as i64
}

/// numpy's `interp(x, [0, end], [from, to])`: the end points exactly, else the line through
/// them in numpy's form (`slope * x + from`).
fn interp(x: f64, end: f64, from: f64, to: f64) -> f64 {
    if x >= end {
        to
    } else if x <= 0.0 {
        from
    } else {
        (to - from) / end * x + from
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// batch 16 (accumulate round(64 / 16) = 4), 100 batches per epoch, 30 epochs, default
    /// hyperparameters: warmup round(3 * 100) = 300 iterations.
    fn run() -> TrainSchedule {
        TrainSchedule::new(ScheduleConfig::default(), 30, 100, 16).unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-15 * b.abs().max(1.0)
    }

    #[test]
    fn warmup_and_accumulation_sizes_follow_ultralytics() {
        let s = run();
        assert_eq!((s.warmup_iterations, s.nominal_accumulate), (300, 4));
        // min(3, epochs - 1) = 1 epoch of warmup for a 2-epoch run; none for 1 epoch.
        assert_eq!(warmup_iterations(3.0, 2, 100), 100);
        assert_eq!(warmup_iterations(3.0, 1, 100), 0);
        // round(0.5 * 5) = 2 (ties to even), 64 / 128 rounds to 0 -> 1, 64 / 24 -> 3.
        assert_eq!(warmup_iterations(0.5, 30, 5), 2);
        assert_eq!(accumulate_for(64, 128), 1);
        assert_eq!(accumulate_for(64, 24), 3);
    }

    #[test]
    fn iteration_zero_starts_biases_at_warmup_bias_lr_and_the_rest_at_zero() {
        let s = run().at(0);
        assert_eq!(s.lrs, [0.0, 0.0, 0.1]);
        assert_eq!((s.momentum, s.accumulate), (0.8, 1));
    }

    #[test]
    fn iteration_fifty_interpolates_as_numpy() {
        // np.interp(50, [0, 300], ...): bias 0.085, others 0.0016666666666666668,
        // momentum 0.8228333333333334, accumulate round(1.5) = 2.
        let s = run().at(50);
        assert!(close(s.lrs[0], 0.0016666666666666668), "{:?}", s.lrs);
        assert!(close(s.lrs[1], 0.0016666666666666668));
        assert!(close(s.lrs[2], 0.085), "{:?}", s.lrs);
        assert!(close(s.momentum, 0.8228333333333334));
        assert_eq!(s.accumulate, 2);
    }

    #[test]
    fn warmup_targets_the_current_epochs_rate() {
        // ni 150 is epoch 1: target 0.01 * lf(1) = 0.00967; bias np.interp = 0.05483500000000001.
        let s = run().at(150);
        assert!(close(s.lrs[2], 0.054835), "{:?}", s.lrs);
        assert!(close(s.lrs[0], 0.004835), "{:?}", s.lrs);
        assert!(close(s.momentum, 0.8685));
    }

    #[test]
    fn warmup_end_lands_on_the_targets() {
        // ni 300 = epoch 3: 0.01 * lf(3) = 0.00901 for every group, momentum 0.937, accumulate 4.
        let s = run().at(300);
        assert!(s.lrs.iter().all(|&l| close(l, 0.00901)), "{:?}", s.lrs);
        assert_eq!((s.momentum, s.accumulate), (0.937, 4));
    }

    #[test]
    fn epoch_ten_of_thirty_trains_at_the_linear_rate() {
        // lf(10) = (1 - 10 / 30) * 0.99 + 0.01 = 0.67 -> lr 0.0067.
        let s = run().at(1000);
        assert!(s.lrs.iter().all(|&l| close(l, 0.0067)), "{:?}", s.lrs);
        assert!(close(run().lf(29), 0.043));
    }

    #[test]
    fn steps_happen_every_accumulate_iterations() {
        assert!(steps_at(0, None, 1));
        assert!(!steps_at(2, None, 4));
        assert!(steps_at(3, None, 4));
        assert!(!steps_at(6, Some(3), 4));
        assert!(steps_at(7, Some(3), 4));
    }

    #[test]
    fn a_zero_batch_size_is_an_error() {
        assert!(TrainSchedule::new(ScheduleConfig::default(), 30, 100, 0).is_err());
    }
}
