//! Optimizer kernels (kernels/optim.cu): the global gradient norm of many tensors, clipping by
//! a norm that stays on the device, and fused AdamW / Lion / SGD updates of many parameters per
//! launch. Tensor pointers and sizes travel by value in a kernel-parameter table (one table per
//! launch, several launches for long parameter lists), so a step uploads nothing and waits for
//! nothing. The host learns about skipped steps later, through an i64 counter buffer it reads
//! when asked (or picks up from a `Readback` without waiting).
//!
//! The functions take raw device addresses because an optimizer step spans many tensors; the
//! caller keeps the tensors alive until the call returns (frees are stream-ordered, so dropping
//! them after the launches are queued is safe).
//!
//! - plan.rs: splitting a tensor list into launches whose tables fit the kernel parameters.
//! - clip.rs: the global gradient norm and scaling gradients by it.
//! - update.rs: the fused update of many parameters.

mod clip;
mod plan;
mod update;

pub use clip::NORM_MAX;
pub use clip::{grad_norm, lerp_all, scale_by_norm};
pub use update::fused_update;
pub use update::{UpdateItem, UPDATE_MAX};

use crate::{DType, Error, Result};

/// Threads per block (`OPT_BLOCK`, the kernels' launch bounds).
const BLOCK: u32 = 256;
pub use crate::spec::optim::{COUNTER_HEAD, SKIP_LOG};

/// A contiguous run of `numel` elements of `dtype` at device address `ptr`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DevSlice {
    pub ptr: u64,
    pub numel: usize,
    pub dtype: DType,
}

/// The kernels' code for a float dtype (`OPT_F32` and friends).
fn dtype_code(op: &'static str, dtype: DType) -> Result<i32> {
    Ok(match dtype {
        DType::F32 => 0,
        DType::BF16 => 1,
        DType::F16 => 2,
        DType::F64 => 3,
        _ => {
            return Err(Error::UnsupportedDType {
                op,
                dtype,
                detail: ": optimizer kernels take float tensors".into(),
            })
        }
    })
}
