//! RustingBrain's engine: N-D tensors with autograd on run-time dtypes and devices, the ops
//! and their backward passes, nn layers, optimizers, data loading and weight formats.
//! It knows nothing about Rhai; the bindings crate exposes it to scripts.

pub mod amp;
// The backends are a crate of their own (the leaf), re-exported under their old paths.
pub use rusting_brain_backend as backend;
use rusting_brain_backend::device;
pub use rusting_brain_backend::{
    bail, cpu_dispatch, cpu_dispatch2, dtype, error, layout, messages,
};
pub mod autograd;
pub mod cancel;
pub mod capture;
pub mod data;
pub mod dist;
pub mod gradcheck;
pub mod graph;
pub mod io;
pub mod metrics;
pub mod models;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod random;
mod tensor;
pub mod text;
pub mod vision;

pub use autograd::{is_grad_enabled, no_grad, NoGradGuard};
pub use device::{Device, DeviceGraph};
pub use dtype::{DType, WithDType};
pub use error::{Error, Result};
pub use layout::Layout;
pub use ops::attention::AttentionOptions;
pub use ops::conv::Conv2dOptions;
pub use ops::conv_transpose::ConvTranspose2dOptions;
pub use ops::linear_loss::linear_cross_entropy;
pub use ops::loss::{
    bce_with_logits, cross_entropy, huber_loss, mse_loss, CrossEntropyOptions, Reduction,
};
pub use random::{manual_seed, Generator};
pub use tensor::{HostReader, Tensor, TensorData};
