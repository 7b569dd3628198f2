//! Learning-rate schedules as pure functions of the step (counted from 1), so a resumed run
//! needs only the step count to continue on the same curve.

use crate::backend::spec::optim::DeviceSchedule;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Serialized with a `kind` tag (`{"kind": "warmup_cosine", "peak_lr": ...}`), as checkpoints
/// store it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Schedule {
    Constant {
        lr: f64,
    },
    /// Linear warmup from peak/warmup_steps at step 1 to peak at step warmup_steps, then a
    /// half cosine down to min_lr at total_steps, and min_lr after that.
    WarmupCosine {
        peak_lr: f64,
        min_lr: f64,
        warmup_steps: u64,
        total_steps: u64,
    },
    /// Warmup-stable-decay: linear warmup to peak, peak for stable_steps, then a linear decay
    /// to min_lr over decay_steps, and min_lr after that. The long flat phase lets a run be
    /// extended, or branched into a short decay, from any checkpoint.
    WarmupStableDecay {
        peak_lr: f64,
        min_lr: f64,
        warmup_steps: u64,
        stable_steps: u64,
        decay_steps: u64,
    },
    /// torch's `StepLR` counted in optimizer steps: `lr * gamma^floor((step - 1) / step_size)`.
    Step {
        lr: f64,
        step_size: u64,
        gamma: f64,
    },
    /// torch's `OneCycleLR` (two phases, `cycle_momentum=False`): from `max_lr / div_factor` up
    /// to `max_lr` over the first `pct_start` of `total_steps`, then down to
    /// `max_lr / div_factor / final_div_factor` at the last step, and that rate after it.
    OneCycle {
        max_lr: f64,
        total_steps: u64,
        pct_start: f64,
        div_factor: f64,
        final_div_factor: f64,
        anneal: Anneal,
    },
}

/// How a one-cycle phase moves between its end rates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Anneal {
    /// Half a cosine (torch's `anneal_strategy="cos"`).
    Cos,
    Linear,
}

impl Anneal {
    /// The rate `p` of the way (0..=1) from `start` to `end`, in torch's arithmetic.
    fn at(self, start: f64, end: f64, p: f64) -> f64 {
        match self {
            Anneal::Cos => end + (start - end) / 2.0 * ((std::f64::consts::PI * p).cos() + 1.0),
            Anneal::Linear => (end - start) * p + start,
        }
    }

    fn code(self) -> i64 {
        match self {
            Anneal::Cos => 0,
            Anneal::Linear => 1,
        }
    }
}

/// The one-cycle curve's fixed points: (initial rate, final rate, the step number (from 0) that
/// ends the rise).
fn one_cycle_points(
    max_lr: f64,
    total_steps: u64,
    pct_start: f64,
    div_factor: f64,
    final_div_factor: f64,
) -> (f64, f64, f64) {
    let initial = max_lr / div_factor;
    (
        initial,
        initial / final_div_factor,
        pct_start * total_steps as f64 - 1.0,
    )
}

/// peak * step / warmup during warmup (steps 1..=warmup), `None` after it.
fn warmup(peak: f64, warmup_steps: u64, step: u64) -> Option<f64> {
    (step <= warmup_steps && warmup_steps > 0).then(|| peak * step as f64 / warmup_steps as f64)
}

/// How far `step` is into a phase that starts after `start` and lasts `len` steps, in [0, 1].
fn progress(step: u64, start: u64, len: u64) -> f64 {
    if len == 0 {
        return 1.0;
    }
    (step.saturating_sub(start) as f64 / len as f64).min(1.0)
}

impl Schedule {
    /// The learning rate for step `step` (the first step is 1).
    pub fn lr_at(&self, step: u64) -> f64 {
        match *self {
            Schedule::Constant { lr } => lr,
            Schedule::WarmupCosine {
                peak_lr,
                min_lr,
                warmup_steps,
                total_steps,
            } => warmup(peak_lr, warmup_steps, step).unwrap_or_else(|| {
                let p = progress(step, warmup_steps, total_steps.saturating_sub(warmup_steps));
                min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + (std::f64::consts::PI * p).cos())
            }),
            Schedule::WarmupStableDecay {
                peak_lr,
                min_lr,
                warmup_steps,
                stable_steps,
                decay_steps,
            } => warmup(peak_lr, warmup_steps, step).unwrap_or_else(|| {
                let p = progress(step, warmup_steps + stable_steps, decay_steps);
                peak_lr + (min_lr - peak_lr) * p
            }),
            Schedule::Step {
                lr,
                step_size,
                gamma,
            } => {
                let drops = step.saturating_sub(1) / step_size.max(1);
                lr * gamma.powf(drops as f64)
            }
            Schedule::OneCycle {
                max_lr,
                total_steps,
                pct_start,
                div_factor,
                final_div_factor,
                anneal,
            } => {
                let (initial, last, rise_end) =
                    one_cycle_points(max_lr, total_steps, pct_start, div_factor, final_div_factor);
                // torch's step number counts from 0 at the first step.
                let s = step.saturating_sub(1) as f64;
                if s <= rise_end {
                    anneal.at(initial, max_lr, s / rise_end)
                } else {
                    let p = (s - rise_end) / (total_steps as f64 - 1.0 - rise_end);
                    anneal.at(max_lr, last, p.min(1.0))
                }
            }
        }
    }

    /// Rejects negative or non-finite rates and a min above the peak.
    pub fn validate(&self) -> Result<()> {
        let invalid = |why: &str| Err(Error::invalid("schedule", format!("{why}, got {self:?}")));
        let (peak, min) = match *self {
            Schedule::Constant { lr } => (lr, 0.0),
            Schedule::Step {
                lr,
                step_size,
                gamma,
            } => {
                if step_size == 0 || !(gamma.is_finite() && gamma > 0.0) {
                    return invalid("a step schedule needs step_size >= 1 and a finite gamma > 0");
                }
                (lr, 0.0)
            }
            Schedule::OneCycle {
                max_lr,
                total_steps,
                pct_start,
                div_factor,
                final_div_factor,
                ..
            } => {
                let (_, _, rise_end) =
                    one_cycle_points(max_lr, total_steps, pct_start, div_factor, final_div_factor);
                // torch divides by both phases' lengths: each must be longer than 0 steps.
                if !(rise_end > 0.0 && rise_end < total_steps as f64 - 1.0) {
                    return invalid(
                        "a one-cycle schedule needs 0 < pct_start * total - 1 < total - 1 \
                         (each phase at least a step)",
                    );
                }
                if !(div_factor >= 1.0 && final_div_factor >= 1.0) {
                    return invalid(
                        "a one-cycle schedule needs div_factor and final_div_factor >= 1",
                    );
                }
                (max_lr, 0.0)
            }
            Schedule::WarmupCosine {
                peak_lr, min_lr, ..
            }
            | Schedule::WarmupStableDecay {
                peak_lr, min_lr, ..
            } => (peak_lr, min_lr),
        };
        if !(peak.is_finite() && min.is_finite() && min >= 0.0 && min <= peak) {
            return invalid("needs finite 0 <= min_lr <= peak_lr");
        }
        Ok(())
    }

    /// The schedule as the numbers the fused CUDA kernels evaluate at the device's step count
    /// (the same curve as `lr_at`; step counts past i64::MAX saturate).
    pub fn on_device(&self) -> DeviceSchedule {
        let steps = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        match *self {
            Schedule::Constant { lr } => DeviceSchedule {
                kind: DeviceSchedule::CONSTANT,
                peak: lr,
                min: 0.0,
                aux: [0.0; 2],
                steps: [0; 3],
            },
            Schedule::Step {
                lr,
                step_size,
                gamma,
            } => DeviceSchedule {
                kind: DeviceSchedule::STEP,
                peak: lr,
                min: 0.0,
                aux: [gamma, 0.0],
                steps: [steps(step_size), 0, 0],
            },
            Schedule::OneCycle {
                max_lr,
                total_steps,
                pct_start,
                div_factor,
                final_div_factor,
                anneal,
            } => {
                let (initial, last, rise_end) =
                    one_cycle_points(max_lr, total_steps, pct_start, div_factor, final_div_factor);
                DeviceSchedule {
                    kind: DeviceSchedule::ONE_CYCLE,
                    peak: max_lr,
                    min: last,
                    aux: [initial, rise_end],
                    steps: [steps(total_steps), anneal.code(), 0],
                }
            }
            Schedule::WarmupCosine {
                peak_lr,
                min_lr,
                warmup_steps,
                total_steps,
            } => DeviceSchedule {
                kind: DeviceSchedule::WARMUP_COSINE,
                peak: peak_lr,
                min: min_lr,
                aux: [0.0; 2],
                steps: [steps(warmup_steps), steps(total_steps), 0],
            },
            Schedule::WarmupStableDecay {
                peak_lr,
                min_lr,
                warmup_steps,
                stable_steps,
                decay_steps,
            } => DeviceSchedule {
                kind: DeviceSchedule::WARMUP_STABLE_DECAY,
                peak: peak_lr,
                min: min_lr,
                aux: [0.0; 2],
                steps: [steps(warmup_steps), steps(stable_steps), steps(decay_steps)],
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_lrs(s: &Schedule, expected: &[(u64, f64)]) {
        for &(step, lr) in expected {
            let got = s.lr_at(step);
            assert!((got - lr).abs() < 1e-12, "step {step}: {got} != {lr}");
        }
    }

    #[test]
    fn warmup_cosine_values_at_key_steps() {
        let s = Schedule::WarmupCosine {
            peak_lr: 1.0,
            min_lr: 0.1,
            warmup_steps: 10,
            total_steps: 110,
        };
        assert_lrs(
            &s,
            &[
                (1, 0.1),
                (5, 0.5),
                (10, 1.0),
                (60, 0.55),
                (110, 0.1),
                (1000, 0.1),
            ],
        );
        // A quarter of the way through the decay: min + (peak - min) * (1 + cos(pi/4)) / 2.
        let q = 0.1 + 0.9 * 0.5 * (1.0 + std::f64::consts::FRAC_1_SQRT_2);
        assert_lrs(&s, &[(35, q)]);
    }

    #[test]
    fn warmup_stable_decay_values_at_key_steps() {
        let s = Schedule::WarmupStableDecay {
            peak_lr: 2.0,
            min_lr: 0.0,
            warmup_steps: 4,
            stable_steps: 6,
            decay_steps: 10,
        };
        assert_lrs(
            &s,
            &[
                (1, 0.5),
                (4, 2.0),
                (5, 2.0),
                (10, 2.0),
                (15, 1.0),
                (20, 0.0),
                (25, 0.0),
            ],
        );
    }

    #[test]
    fn constant_schedule_and_validation() {
        assert_lrs(
            &Schedule::Constant { lr: 3e-4 },
            &[(1, 3e-4), (10_000, 3e-4)],
        );
        let bad = Schedule::WarmupCosine {
            peak_lr: 0.1,
            min_lr: 0.2,
            warmup_steps: 0,
            total_steps: 5,
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn on_device_encodes_each_schedule_as_the_kernels_read_it() {
        let wsd = Schedule::WarmupStableDecay {
            peak_lr: 1.0,
            min_lr: 0.1,
            warmup_steps: 2,
            stable_steps: 3,
            decay_steps: 4,
        };
        let d = wsd.on_device();
        assert_eq!(
            (d.kind, d.peak, d.min, d.steps),
            (DeviceSchedule::WARMUP_STABLE_DECAY, 1.0, 0.1, [2, 3, 4])
        );
        let cosine = Schedule::WarmupCosine {
            peak_lr: 2.0,
            min_lr: 0.5,
            warmup_steps: u64::MAX,
            total_steps: 7,
        };
        let d = cosine.on_device();
        assert_eq!(
            (d.kind, d.peak, d.min, d.steps),
            (DeviceSchedule::WARMUP_COSINE, 2.0, 0.5, [i64::MAX, 7, 0])
        );
        let d = Schedule::Constant { lr: 3e-4 }.on_device();
        assert_eq!((d.kind, d.peak), (DeviceSchedule::CONSTANT, 3e-4));
    }
}
