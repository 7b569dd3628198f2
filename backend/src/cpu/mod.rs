//! The CPU backend: the parity reference and the no-GPU fallback. Floats compute in f32 (f64
//! for F64); BF16 and F16 convert on load and store.

mod alloc;
pub mod batch_norm;
pub mod conv;
pub mod decode_attention;
pub mod elementwise;
pub mod floats;
pub mod ggml;
pub mod index;
pub mod loss;
pub mod map;
pub mod matmul;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod simd;
pub mod softmax;
mod storage;
pub mod workers;

pub use storage::{CpuStorage, IntoCpuStorage};
