//! NCCL, the collective library, for data-parallel runs: one communicator per process over
//! the ranks of a run, and the in-place all-reduce the gradients take. NCCL is loaded at run
//! time like the other CUDA libraries, and probed first, because cudarc panics on a missing
//! library and a panic would end a REPL session.
//!
//! The collectives run on a stream of the communicator's own, each after the work queued on
//! the device's stream before it, so a bucket of gradients is summed across ranks while the
//! device's stream goes on with the backward; the device's stream waits for them only where
//! it next needs the sums (`wait_for_started`).
//!
//! NVLink multicast (NVLS) stays off: `brain launch` sets `NCCL_NVLS_ENABLE=0`, and nothing
//! here calls `cuMulticastCreate`.

use super::device::order_after;
use super::optim::DevSlice;
use super::CudaDevice;
use crate::{DType, Error, Result};
use cudarc::driver::{result as driver, sys as driver_sys};
use cudarc::nccl::{result, sys};
use std::sync::Arc;

/// The bytes ranks exchange to join one communicator (`ncclUniqueId`).
pub const UNIQUE_ID_BYTES: usize = 128;

/// Whether NCCL can be loaded; the error names the files looked for.
pub fn probe() -> std::result::Result<(), String> {
    super::probe::find_library(
        "nccl",
        "data-parallel training on several GPUs needs NCCL: is its lib directory on \
         LD_LIBRARY_PATH?",
    )
}

fn nccl_error(what: &str, e: result::NcclError) -> Error {
    Error::Cuda(format!("{what}: NCCL error {:?}", e.0))
}

/// A new unique id (rank 0 makes it and hands it to the others).
pub fn unique_id() -> Result<[u8; UNIQUE_ID_BYTES]> {
    probe().map_err(Error::Cuda)?;
    let id = result::get_uniqueid().map_err(|e| nccl_error("ncclGetUniqueId", e))?;
    Ok(id.internal.map(|c| c as u8))
}

/// What one member of a group does with its slice, in place.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Collective {
    /// Sums it over every rank (all-reduce).
    Sum,
    /// Every rank gets this rank's values.
    BroadcastFrom(usize),
}

/// This process's member of a communicator over `world_size` ranks, on `dev`.
pub struct Communicator {
    comm: sys::ncclComm_t,
    dev: Arc<CudaDevice>,
    /// Where the collectives run, beside the device's stream.
    stream: driver_sys::CUstream,
    pub rank: usize,
    pub world_size: usize,
}

// SAFETY: the communicator and its own stream are used through `&self` from one thread at a
// time (the trainer's; the engine queues its device work from that thread too, and the two
// streams are ordered by events, not by the host); NCCL communicators and CUDA streams may
// move between threads.
unsafe impl Send for Communicator {}
unsafe impl Sync for Communicator {}

impl Communicator {
    /// Joins the communicator of `id` as `rank` of `world_size`: every rank calls this with the
    /// same id, and it returns once all have (NCCL's `ncclCommInitRank`).
    pub fn join(
        dev: &Arc<CudaDevice>,
        id: &[u8; UNIQUE_ID_BYTES],
        rank: usize,
        world_size: usize,
    ) -> Result<Communicator> {
        probe().map_err(Error::Cuda)?;
        if world_size == 0 || rank >= world_size {
            return Err(Error::invalid(
                "nccl",
                format!("rank {rank} does not fit a world of {world_size}"),
            ));
        }
        let to_int =
            |n: usize| i32::try_from(n).map_err(|_| Error::invalid("nccl", format!("{n} ranks")));
        let unique = sys::ncclUniqueId {
            internal: id.map(|b| b as std::ffi::c_char),
        };
        dev.bind()?;
        let stream = driver::stream::create(driver::stream::StreamKind::NonBlocking)
            .map_err(|e| Error::Cuda(format!("cuStreamCreate: {e:?}")))?;
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: the device's context is current; `comm` receives the new communicator.
        let joined = unsafe {
            result::comm_init_rank(&mut comm, to_int(world_size)?, unique, to_int(rank)?)
                .map_err(|e| nccl_error("ncclCommInitRank", e))
        };
        if let Err(e) = joined {
            // SAFETY: the stream was made above and nothing was queued on it.
            let _ = unsafe { driver::stream::destroy(stream) };
            return Err(e);
        }
        Ok(Communicator {
            comm,
            dev: dev.clone(),
            stream,
            rank,
            world_size,
        })
    }

    /// Starts `items` as one NCCL group (one launch for a bucket of gradients, without copying
    /// them into one buffer first), each collective in place on its slice. It runs on the
    /// communicator's stream after the work queued on the device's stream so far (the kernels
    /// that wrote the slices); the device's stream does not wait for it until
    /// `wait_for_started`.
    ///
    /// # Safety
    /// Each slice must address live device memory of its size and dtype on this
    /// communicator's device, which nothing queued on the device's stream reads or writes
    /// before `wait_for_started`, and every rank must call this with the same collectives,
    /// sizes and dtypes in the same order.
    pub unsafe fn start_group(&self, items: &[(DevSlice, Collective)]) -> Result<()> {
        let types = items
            .iter()
            .map(|(x, _)| nccl_dtype(x.dtype))
            .collect::<Result<Vec<_>>>()?;
        if let Some(root) = items.iter().find_map(|(_, c)| match c {
            Collective::BroadcastFrom(r) if *r >= self.world_size => Some(*r),
            _ => None,
        }) {
            return Err(Error::invalid(
                "broadcast",
                format!("from rank {root} in a world of {}", self.world_size),
            ));
        }
        self.dev.bind()?;
        order_after(self.dev.stream(), self.stream)?;
        result::group_start().map_err(|e| nccl_error("ncclGroupStart", e))?;
        let stream = self.stream as sys::cudaStream_t;
        let mut queued = Ok(());
        for ((x, collective), dtype) in items.iter().zip(types) {
            let p = x.ptr as *mut std::ffi::c_void;
            queued = match *collective {
                Collective::Sum => result::all_reduce(
                    p,
                    p,
                    x.numel,
                    dtype,
                    sys::ncclRedOp_t::ncclSum,
                    self.comm,
                    stream,
                )
                .map_err(|e| nccl_error("ncclAllReduce", e)),
                Collective::BroadcastFrom(root) => {
                    result::broadcast(p, p, x.numel, dtype, root as i32, self.comm, stream)
                        .map_err(|e| nccl_error("ncclBroadcast", e))
                }
            }
            .map(|_| ());
            if queued.is_err() {
                break;
            }
        }
        // The group is closed whatever happened inside it.
        let closed = result::group_end().map_err(|e| nccl_error("ncclGroupEnd", e));
        queued.and(closed.map(|_| ()))
    }

    /// Makes the work queued on the device's stream from now on wait for every collective
    /// started so far.
    pub fn wait_for_started(&self) -> Result<()> {
        self.dev.bind()?;
        order_after(self.stream, self.dev.stream())
    }
}

/// NCCL's code for a gradient dtype.
fn nccl_dtype(dtype: DType) -> Result<sys::ncclDataType_t> {
    Ok(match dtype {
        DType::F32 => sys::ncclDataType_t::ncclFloat32,
        DType::BF16 => sys::ncclDataType_t::ncclBfloat16,
        DType::F16 => sys::ncclDataType_t::ncclFloat16,
        DType::F64 => sys::ncclDataType_t::ncclFloat64,
        other => {
            return Err(Error::invalid(
                "all_reduce",
                format!("{other:?} gradients are not reduced (F32, BF16, F16, F64 are)"),
            ))
        }
    })
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            // SAFETY: the communicator and its stream were made by `join` and are destroyed
            // once, the stream after the collectives queued on it have finished.
            unsafe {
                let _ = driver::stream::synchronize(self.stream);
                let _ = result::comm_destroy(self.comm);
                let _ = driver::stream::destroy(self.stream);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_nccl_the_error_names_the_library() {
        // On a machine with NCCL this says nothing; without it, it must name libnccl.
        if let Err(e) = probe() {
            assert!(e.contains("libnccl.so"), "{e}");
            assert!(unique_id().unwrap_err().to_string().contains("libnccl"));
        }
    }
}
