//! Optimizers (SGD, Adam, AdamW, RMSprop, Lion), learning-rate schedules and gradient clipping. An optimizer
//! holds its parameters' handles and updates their storage in place under no_grad, so the
//! module sees the new values. Its state (moments, step counts, learning rate) saves and loads
//! as named tensors and scalars, and a resumed run continues bit for bit.

mod adam;
mod adamw;
mod clip;
mod device_steps;
pub mod ema;
mod fused;
mod lerp;
mod lion;
mod optimizer;
pub mod plateau;
mod rmsprop;
pub mod schedule;
mod sgd;
mod state;

#[cfg(test)]
mod tests;

pub use crate::backend::spec::optim::UpdateRule;
pub use adam::{Adam, AdamConfig};
pub use adamw::{AdamW, AdamWConfig};
pub use clip::{
    clip_grad_norm, clip_grad_norm_tensor, global_grad_norm, global_grad_norm_tensor, scale_grads,
};
pub use ema::{EmaSchedule, ModelEma};
pub use fused::{replayed_step, settle_step_counts};
pub use lerp::lerp_all_;
pub use lion::{Lion, LionConfig};
pub use optimizer::{
    numbered, state_dtype, NormScope, Optimizer, OptimizerCore, Param, ParamState, StepOutcome,
};
pub use plateau::{Plateau, PlateauConfig, PlateauMode, ThresholdMode};
pub use rmsprop::{Rmsprop, RmspropConfig};
pub use schedule::{Anneal, Schedule};
pub use sgd::{Sgd, SgdConfig};
pub use state::{param_key, OptimizerState, StateReader};
