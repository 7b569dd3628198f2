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
        }
    }

    /// Rejects negative or non-finite rates and a min above the peak.
    pub fn validate(&self) -> Result<()> {
        let (peak, min) = match *self {
            Schedule::Constant { lr } => (lr, 0.0),
            Schedule::WarmupCosine {
                peak_lr, min_lr, ..
            }
            | Schedule::WarmupStableDecay {
                peak_lr, min_lr, ..
            } => (peak_lr, min_lr),
        };
        if !(peak.is_finite() && min.is_finite() && min >= 0.0 && min <= peak) {
            return Err(Error::invalid(
                "schedule",
                format!("needs finite 0 <= min_lr <= peak_lr, got {self:?}"),
            ));
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
                steps: [0; 3],
            },
            Schedule::WarmupCosine {
                peak_lr,
                min_lr,
                warmup_steps,
                total_steps,
            } => DeviceSchedule {
                kind: DeviceSchedule::WARMUP_COSINE,
                peak: peak_lr,
                min: min_lr,
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
