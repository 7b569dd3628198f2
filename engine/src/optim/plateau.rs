//! Lowering the learning rate when a watched metric stops improving (torch's
//! `ReduceLROnPlateau`). Unlike a `Schedule` it depends on values seen during training, so it
//! lives on the host and sets the optimizer's rate between steps.

use crate::{Error, Result};

/// Whether a lower (validation loss) or a higher (accuracy) metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlateauMode {
    Min,
    Max,
}

/// Whether `threshold` is a fraction of the best value (`Rel`) or an amount (`Abs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThresholdMode {
    Rel,
    Abs,
}

/// torch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlateauConfig {
    pub mode: PlateauMode,
    /// The rate is multiplied by this on a plateau.
    pub factor: f64,
    /// How many observations without improvement are tolerated; the next one lowers the rate.
    pub patience: u64,
    pub threshold: f64,
    pub threshold_mode: ThresholdMode,
    /// Observations after a reduction during which bad ones are not counted.
    pub cooldown: u64,
    pub min_lr: f64,
    /// A reduction smaller than this is not applied.
    pub eps: f64,
}

impl Default for PlateauConfig {
    fn default() -> Self {
        PlateauConfig {
            mode: PlateauMode::Min,
            factor: 0.1,
            patience: 10,
            threshold: 1e-4,
            threshold_mode: ThresholdMode::Rel,
            cooldown: 0,
            min_lr: 0.0,
            eps: 1e-8,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Plateau {
    config: PlateauConfig,
    best: f64,
    bad: u64,
    cooldown_left: u64,
}

impl Plateau {
    pub fn new(config: PlateauConfig) -> Result<Plateau> {
        let c = &config;
        if !(c.factor > 0.0 && c.factor < 1.0) {
            return Err(Error::invalid(
                "plateau",
                format!("factor must be in (0, 1), got {}", c.factor),
            ));
        }
        if !(c.threshold.is_finite() && c.threshold >= 0.0 && c.min_lr >= 0.0 && c.eps >= 0.0) {
            return Err(Error::invalid(
                "plateau",
                format!(
                    "threshold, min_lr and eps must be finite and >= 0, got {} {} {}",
                    c.threshold, c.min_lr, c.eps
                ),
            ));
        }
        let best = match config.mode {
            PlateauMode::Min => f64::INFINITY,
            PlateauMode::Max => f64::NEG_INFINITY,
        };
        Ok(Plateau {
            config,
            best,
            bad: 0,
            cooldown_left: 0,
        })
    }

    /// The best value seen so far (±infinity before the first).
    pub fn best(&self) -> f64 {
        self.best
    }

    fn improves(&self, value: f64) -> bool {
        let (t, best) = (self.config.threshold, self.best);
        match (self.config.mode, self.config.threshold_mode) {
            (PlateauMode::Min, ThresholdMode::Rel) => value < best * (1.0 - t),
            (PlateauMode::Min, ThresholdMode::Abs) => value < best - t,
            (PlateauMode::Max, ThresholdMode::Rel) => value > best * (1.0 + t),
            (PlateauMode::Max, ThresholdMode::Abs) => value > best + t,
        }
    }

    /// Takes one observation of the metric and returns the rate to use from now on, given the
    /// current one. A NaN metric counts as no improvement, as in torch.
    pub fn observe(&mut self, metric: f64, lr: f64) -> f64 {
        if self.improves(metric) {
            self.best = metric;
            self.bad = 0;
        } else {
            self.bad += 1;
        }
        if self.cooldown_left > 0 {
            self.cooldown_left -= 1;
            self.bad = 0;
        }
        if self.bad <= self.config.patience {
            return lr;
        }
        self.cooldown_left = self.config.cooldown;
        self.bad = 0;
        let lowered = (lr * self.config.factor).max(self.config.min_lr);
        if lr - lowered > self.config.eps {
            lowered
        } else {
            lr
        }
    }
}
