//! Collectives on tensors: what the trainers call, in the engine's terms. NCCL does the work
//! (`backend::cuda::nccl`); this file only turns a tensor into the device range it reduces.

use super::Dist;
use crate::{optim, Device, Error, Result, Tensor};

impl Dist {
    /// Sums `t` over every rank, in place, queued on its device's stream. Every rank calls it
    /// with a tensor of the same shape and dtype, in the same order. A run of one goes through
    /// NCCL too on CUDA (a communicator of one), so the path the ranks take is the one a single
    /// GPU tests; on the CPU a run of one leaves `t` as it is, and more ranks are an error.
    pub fn all_reduce_sum_(&self, t: &Tensor) -> Result<()> {
        match t.device() {
            Device::Cuda(ordinal) => {
                if !t.is_contiguous() {
                    return Err(Error::invalid(
                        "all_reduce",
                        "the tensor must be contiguous (reduce a contiguous copy)",
                    ));
                }
                let comm = self.communicator(ordinal)?;
                let slice = optim::written_slice(t)?;
                // SAFETY: `slice` is the tensor's own contiguous range on `ordinal`, the
                // communicator's device; every rank reduces the same tensors in order.
                unsafe { comm.all_reduce_sum(&slice) }
            }
            Device::Cpu if self.world_size == 1 => Ok(()),
            Device::Cpu => Err(Error::UnsupportedDevice {
                op: "all_reduce across ranks (NCCL)",
                device: Device::Cpu,
            }),
        }
    }
}
