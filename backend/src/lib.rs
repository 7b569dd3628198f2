//! RustingBrain's backends: where a tensor's data lives (`Storage`: host memory or a CUDA
//! allocation) and the kernels that compute on it, one module per backend, plus `spec`, the
//! vocabulary the backends share (op kinds, shapes, geometries, update rules).
//!
//! This crate is the leaf of the engine: it knows dtypes, devices, layouts and errors, and
//! nothing of tensors, autograd, ops, optimizers or models (the `rusting_brain` crate above
//! builds those on it). Being a crate of its own, it cannot import upward: the compiler
//! refuses. The CUDA backend imports nothing from the CPU backend but `CpuStorage`, the host
//! side of a transfer.

pub mod cpu;
pub mod cuda;
pub mod device;
pub mod dtype;
pub mod error;
pub mod layout;
pub mod memory;
pub mod messages;
pub mod spec;
mod storage;

pub use cpu::{CpuStorage, IntoCpuStorage};
pub use cuda::CudaStorage;
pub use device::{Device, DeviceGraph};
pub use dtype::{DType, WithDType};
pub use error::{Error, Result};
pub use layout::Layout;
pub use storage::{Storage, StorageCell};
