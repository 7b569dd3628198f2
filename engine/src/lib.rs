//! RustingBrain's engine: N-D tensors with autograd on run-time dtypes and devices, the ops
//! and their backward passes, nn layers, optimizers, data loading and weight formats.
//! It knows nothing about Rhai; the bindings crate exposes it to scripts.

pub mod amp;
pub mod autograd;
pub mod backend;
pub mod cancel;
pub mod data;
pub mod dtype;
pub mod error;
pub mod gradcheck;
pub mod io;
pub mod layout;
pub mod messages;
pub mod models;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod random;
mod tensor;
pub mod text;

pub use autograd::{is_grad_enabled, no_grad, NoGradGuard};
pub use device::Device;
pub use dtype::{DType, WithDType};
pub use error::{Error, Result};
pub use layout::Layout;
pub use ops::attention::AttentionOptions;
pub use ops::conv::Conv2dOptions;
pub use ops::linear_loss::linear_cross_entropy;
pub use ops::loss::{
    bce_with_logits, cross_entropy, huber_loss, mse_loss, CrossEntropyOptions, Reduction,
};
pub use random::{manual_seed, Generator};
pub use tensor::{Tensor, TensorData};

mod device;
