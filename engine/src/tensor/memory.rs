//! The check every op whose output can outgrow its inputs makes before it allocates: creation
//! ops (sizes from a script), broadcasting, products, gathers, copies of expanded views. A
//! request the device cannot hold is an `OutOfMemory` error naming the op, the shape and the
//! bytes, instead of the allocator's abort (host) or a bare pool error (CUDA).

use crate::backend::memory::{self, SYSTEM_CHECK_MIN_BYTES};
use crate::{DType, Device, Result};

/// Errors when a fresh `shape` of `dtype` on `device` cannot be allocated. On the host it is
/// measured against the memory the system can still give; on a GPU only against the device's
/// total, since the pool keeps freed blocks that the driver counts as used (a request that
/// fits the total but not the pool is then reported by the pool, with the op named).
pub(crate) fn check_alloc(
    op: &'static str,
    shape: &[usize],
    dtype: DType,
    device: Device,
) -> Result<()> {
    match device {
        Device::Cpu => memory::check_host(op, shape, dtype),
        Device::Cuda(_) => {
            let bytes = memory::bytes_for(op, shape, dtype)?;
            if bytes < SYSTEM_CHECK_MIN_BYTES {
                return Ok(());
            }
            let Some((_, total)) = device.memory_info()? else {
                return Ok(());
            };
            if bytes > total {
                return Err(memory::out_of_memory(
                    op,
                    shape,
                    Some(dtype),
                    device,
                    bytes,
                    total,
                ));
            }
            Ok(())
        }
    }
}
