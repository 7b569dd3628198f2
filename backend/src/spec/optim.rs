//! What a fused optimizer step computes: the update rule with its hyperparameters and where the
//! learning rate comes from. A schedule arrives already encoded as the numbers the kernels
//! evaluate (`optim::Schedule::on_device` makes them), so a backend never sees `Schedule`.

/// The update rule and its hyperparameters, as the optimizers' configs hold them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UpdateRule {
    AdamW {
        betas: (f64, f64),
        eps: f64,
        weight_decay: f64,
        decay_1d_params: bool,
    },
    Lion {
        betas: (f64, f64),
        weight_decay: f64,
        decay_1d_params: bool,
    },
    Sgd {
        momentum: f64,
        dampening: f64,
        nesterov: bool,
        weight_decay: f64,
    },
}

impl UpdateRule {
    /// Whether weight decay applies to a parameter of this rank: AdamW and Lion decay only
    /// parameters of rank >= 2 unless asked to decay 1-D ones too; SGD's L2 term applies to all.
    pub fn decays(&self, rank: usize) -> bool {
        match *self {
            UpdateRule::AdamW {
                weight_decay,
                decay_1d_params,
                ..
            }
            | UpdateRule::Lion {
                weight_decay,
                decay_1d_params,
                ..
            } => weight_decay != 0.0 && (rank >= 2 || decay_1d_params),
            UpdateRule::Sgd { weight_decay, .. } => weight_decay != 0.0,
        }
    }
}

/// Where a step's learning rate comes from: a fixed rate, or a schedule evaluated on the device
/// at the device's step count (which a skipped step does not advance).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LrSource {
    Fixed(f64),
    Schedule(DeviceSchedule),
}

/// A learning-rate schedule as plain numbers: the rate at step `s` (from 1) is
/// - `CONSTANT`: `peak`;
/// - `WARMUP_COSINE`: a linear warmup over `steps[0]` steps to `peak`, then a half cosine down
///   to `min` at step `steps[1]`, and `min` after that;
/// - `WARMUP_STABLE_DECAY`: a linear warmup over `steps[0]` steps, `peak` for `steps[1]` steps,
///   a linear decay to `min` over `steps[2]` steps, and `min` after that;
/// - `STEP`: `peak * aux[0]^floor((s - 1) / steps[0])`;
/// - `ONE_CYCLE`: torch's step number `s - 1` goes from `aux[0]` up to `peak` until `aux[1]`,
///   then down to `min` at `steps[0] - 1`, by half a cosine (`steps[1] = 0`) or linearly (1).
///
/// Unused values are 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceSchedule {
    pub kind: i32,
    pub peak: f64,
    pub min: f64,
    pub aux: [f64; 2],
    pub steps: [i64; 3],
}

impl DeviceSchedule {
    pub const CONSTANT: i32 = 0;
    pub const WARMUP_COSINE: i32 = 1;
    pub const WARMUP_STABLE_DECAY: i32 = 2;
    pub const STEP: i32 = 3;
    pub const ONE_CYCLE: i32 = 4;
}

/// How many skipped steps a fused optimizer's counter buffer remembers (step number and norm)
/// for the warning.
pub const SKIP_LOG: usize = 16;
/// Index of the first per-parameter step count in the counter buffer; before it are the
/// applied-step count, the skipped-step count and the skip log.
pub const COUNTER_HEAD: usize = 2 + 2 * SKIP_LOG;
