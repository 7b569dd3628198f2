//! Collectives on tensors: what the trainers call, in the engine's terms. NCCL does the work
//! (`backend::cuda::nccl`); this file turns tensors into the device ranges it reduces.

use super::buckets;
use super::Dist;
use crate::backend::cuda::optim::DevSlice;
use crate::backend::Storage;
use crate::{Device, Error, Result, Tensor};

/// Gradient buckets of about this many bytes: few enough NCCL launches, and (once they go out
/// during the backward) early enough to overlap it; PyTorch DDP's default.
pub const BUCKET_BYTES: usize = 25 << 20;

/// The device range of a CUDA tensor whose elements fill it without gaps in some order (a
/// contiguous tensor or a permutation of one, such as a weight's gradient kept in the
/// weight's order). Every rank has the same layout, so the ranges line up element for
/// element. Takes the write lock for a moment, so a backward that saved the tensor fails
/// instead of reading the sums.
fn dense_slice(op: &'static str, t: &Tensor) -> Result<DevSlice> {
    if !t.layout().is_dense() {
        return Err(Error::invalid(
            op,
            "the tensor must be dense (contiguous or a permutation of it); reduce a contiguous copy",
        ));
    }
    match &*t.storage_cell().write() {
        Storage::Cuda(s) => Ok(DevSlice {
            ptr: s.ptr_at(t.layout().offset()),
            numel: t.numel(),
            dtype: t.dtype(),
        }),
        Storage::Cpu(_) => Err(cpu_ranks()),
    }
}

/// Why CPU tensors are not reduced across ranks.
fn cpu_ranks() -> Error {
    Error::invalid(
        "all_reduce",
        "tensors on the CPU cannot be summed across ranks: NCCL reduces CUDA memory; run \
         `brain launch --gpus N script --device cuda`",
    )
}

impl Dist {
    /// Whether a trainer reduces its gradients: in any run `brain launch` started, a run of
    /// one included, so that path runs on a single GPU too; not in a plain `brain run`.
    pub fn reduces(&self) -> bool {
        self.store.is_some()
    }

    /// Sums `t` over every rank, in place, queued on its device's stream. Every rank calls it
    /// with a tensor of the same shape, layout and dtype, in the same order. A run of one goes
    /// through NCCL too on CUDA (a communicator of one); on the CPU a run of one leaves `t` as
    /// it is, and more ranks are an error (NCCL reduces device memory only).
    pub fn all_reduce_sum_(&self, t: &Tensor) -> Result<()> {
        self.all_reduce_group(std::slice::from_ref(t))
    }

    /// Sums every tensor of `ts` over the ranks, in place, as one NCCL group. All on one device.
    fn all_reduce_group(&self, ts: &[Tensor]) -> Result<()> {
        let Some(first) = ts.first() else {
            return Ok(());
        };
        let ordinal = match first.device() {
            Device::Cpu if self.world_size == 1 => return Ok(()),
            Device::Cpu => return Err(cpu_ranks()),
            Device::Cuda(n) => n,
        };
        if let Some(t) = ts.iter().find(|t| t.device() != first.device()) {
            return Err(Error::invalid(
                "all_reduce",
                format!(
                    "tensors on {:?} and {:?}: one group reduces on one device",
                    first.device(),
                    t.device()
                ),
            ));
        }
        let slices = ts
            .iter()
            .map(|t| dense_slice("all_reduce", t))
            .collect::<Result<Vec<_>>>()?;
        let comm = self.communicator(ordinal)?;
        // SAFETY: each slice is its tensor's own dense range on `ordinal`, the communicator's
        // device; every rank reduces the same tensors in the same order.
        unsafe { comm.all_reduce_sum_group(&slices) }
    }

    /// Sums the gradients of `params` over the ranks, in place, in buckets of about
    /// `BUCKET_BYTES` from the last parameter back (the order a backward finishes them), each
    /// bucket one NCCL group. A parameter without a gradient is an error when there are
    /// several ranks: another rank may have one, and the collectives would no longer pair up.
    pub fn all_reduce_grads(&self, params: &[Tensor]) -> Result<()> {
        let mut grads = Vec::with_capacity(params.len());
        for (i, p) in params.iter().enumerate() {
            let g = p.grad();
            if g.is_none() && self.world_size > 1 {
                return Err(Error::invalid(
                    "all_reduce",
                    format!(
                        "parameter {i} {:?} has no gradient on rank {}: every rank must reduce \
                         the same gradients",
                        p.shape(),
                        self.rank
                    ),
                ));
            }
            grads.push(g);
        }
        // A missing gradient (a run of one) plans as empty, and no bucket holds an empty one.
        let sizes: Vec<_> = grads
            .iter()
            .zip(params)
            .map(|(g, p)| (g.as_ref().map_or(0, Tensor::numel), p.dtype()))
            .collect();
        for bucket in buckets::plan(&sizes, BUCKET_BYTES) {
            let members: Vec<Tensor> = bucket
                .params
                .iter()
                .filter_map(|&i| grads[i].clone())
                .collect();
            self.all_reduce_group(&members)?;
        }
        Ok(())
    }
}
