//! The one way an op reaches a backend. An op hands its operands and one kernel per backend to
//! `dispatch` (or `dispatch_optional`, `dispatch_all` for optional and variable operands);
//! it checks that the operands share a device, takes their storages and calls the kernel of
//! that backend with each operand's storage and layout. Both kernels are arguments, so an op
//! without a CUDA kernel does not compile:
//!
//! ```
//! use rusting_brain::ops::dispatch::dispatch;
//! use rusting_brain::{backend::{cpu, cuda}, Result, Tensor};
//!
//! fn twice(x: &Tensor) -> Result<Tensor> {
//!     let op = rusting_brain::backend::spec::UnaryOp::Affine(2.0, 0.0);
//!     let storage = dispatch(
//!         "twice",
//!         [x],
//!         |[(s, l)]| Ok(cpu::elementwise::unary(s, l, op).into()),
//!         |[(s, l)]| Ok(cuda::elementwise::unary(s, l, op)?.into()),
//!     )?;
//!     Tensor::from_storage(storage, x.shape())
//! }
//! ```
//!
//! ```compile_fail,E0061
//! use rusting_brain::ops::dispatch::dispatch;
//! use rusting_brain::{backend::cpu, Result, Tensor};
//!
//! fn twice(x: &Tensor) -> Result<Tensor> {
//!     let op = rusting_brain::backend::spec::UnaryOp::Affine(2.0, 0.0);
//!     // No CUDA kernel: this does not build.
//!     let storage = dispatch("twice", [x], |[(s, l)]| Ok(cpu::elementwise::unary(s, l, op).into()))?;
//!     Tensor::from_storage(storage, x.shape())
//! }
//! ```
//!
//! Fused kernels whose CPU path is a composition of other ops (attention, rotary embedding,
//! SwiGLU on CUDA) decide at the tensor level which path runs, and reach their CUDA kernel
//! through `cuda_kernel`, the same mechanism with the CPU side answered by an error.
//!
//! An op that writes into an existing tensor (`copy_`, a cache write, an accumulation, a norm's
//! running statistics) goes through `dispatch_mut` (`dispatch_into` for several targets,
//! `cuda_kernel_into` for a fused CUDA writer): the same device check, the targets' storages
//! locked for writing (which bumps their versions, so a backward that saved one fails instead of
//! reading the new values) and the operands' for reading. No op takes a storage lock itself.

use crate::backend::{CpuStorage, CudaStorage, Storage};
use crate::{Device, Error, Layout, Result, Tensor};

/// An operand as a CPU kernel sees it.
pub type CpuOperand<'a> = (&'a CpuStorage, &'a Layout);
/// An operand as a CUDA kernel sees it.
pub type CudaOperand<'a> = (&'a CudaStorage, &'a Layout);

/// Runs the kernel of the backend that holds `operands` (all on one device).
pub fn dispatch<const N: usize, R>(
    op: &'static str,
    operands: [&Tensor; N],
    cpu: impl FnOnce([CpuOperand<'_>; N]) -> Result<R>,
    cuda: impl FnOnce([CudaOperand<'_>; N]) -> Result<R>,
) -> Result<R> {
    run(
        op,
        &operands.map(Some),
        |views| cpu(present(op, views)?),
        |views| cuda(present(op, views)?),
    )
}

/// Like `dispatch` for operands that may be absent (a norm's weight and bias).
pub fn dispatch_optional<const N: usize, R>(
    op: &'static str,
    operands: [Option<&Tensor>; N],
    cpu: impl FnOnce([Option<CpuOperand<'_>>; N]) -> Result<R>,
    cuda: impl FnOnce([Option<CudaOperand<'_>>; N]) -> Result<R>,
) -> Result<R> {
    run(
        op,
        &operands,
        |views| cpu(array(op, views)?),
        |views| cuda(array(op, views)?),
    )
}

/// Like `dispatch` for any number of operands (cat).
pub fn dispatch_all<R>(
    op: &'static str,
    operands: &[&Tensor],
    cpu: impl FnOnce(&[CpuOperand<'_>]) -> Result<R>,
    cuda: impl FnOnce(&[CudaOperand<'_>]) -> Result<R>,
) -> Result<R> {
    let operands: Vec<Option<&Tensor>> = operands.iter().copied().map(Some).collect();
    run(
        op,
        &operands,
        |views| cpu(&views.into_iter().flatten().collect::<Vec<_>>()),
        |views| cuda(&views.into_iter().flatten().collect::<Vec<_>>()),
    )
}

/// For a fused CUDA kernel whose op composes other ops elsewhere: runs `cuda` on the operands'
/// device storages, and is an error naming the op for operands that are not on a GPU.
pub fn cuda_kernel<const N: usize, R>(
    op: &'static str,
    operands: [&Tensor; N],
    cuda: impl FnOnce([CudaOperand<'_>; N]) -> Result<R>,
) -> Result<R> {
    dispatch(
        op,
        operands,
        |_| {
            Err(Error::UnsupportedDevice {
                op,
                device: Device::Cpu,
            })
        },
        cuda,
    )
}

/// A write target as a CPU kernel sees it.
pub type CpuTarget<'a> = (&'a mut CpuStorage, &'a Layout);
/// A write target as a CUDA kernel sees it.
pub type CudaTarget<'a> = (&'a mut CudaStorage, &'a Layout);

/// Runs the kernel that writes into `target` from `operands` (all on one device), with the
/// target's storage locked for writing. An operand that shares the target's storage is an error
/// (its read would wait on the write lock): materialize it first.
pub fn dispatch_mut<const N: usize, R>(
    op: &'static str,
    target: &Tensor,
    operands: [&Tensor; N],
    cpu: impl FnOnce(CpuTarget<'_>, [CpuOperand<'_>; N]) -> Result<R>,
    cuda: impl FnOnce(CudaTarget<'_>, [CudaOperand<'_>; N]) -> Result<R>,
) -> Result<R> {
    dispatch_into(
        op,
        [target],
        operands,
        |[t], xs| cpu(t, xs),
        |[t], xs| cuda(t, xs),
    )
}

/// Like `dispatch_mut` for a kernel that writes several tensors at once (a norm's running
/// mean and variance).
pub fn dispatch_into<const M: usize, const N: usize, R>(
    op: &'static str,
    targets: [&Tensor; M],
    operands: [&Tensor; N],
    cpu: impl FnOnce([CpuTarget<'_>; M], [CpuOperand<'_>; N]) -> Result<R>,
    cuda: impl FnOnce([CudaTarget<'_>; M], [CudaOperand<'_>; N]) -> Result<R>,
) -> Result<R> {
    run_into(
        op,
        &targets,
        &operands,
        |t, xs| cpu(array(op, t)?, array(op, xs)?),
        |t, xs| cuda(array(op, t)?, array(op, xs)?),
    )
}

/// For a fused CUDA kernel that writes into `targets` (a decode step's key and value caches):
/// `dispatch_into` with the CPU side answered by an error naming the op.
pub fn cuda_kernel_into<const M: usize, const N: usize, R>(
    op: &'static str,
    targets: [&Tensor; M],
    operands: [&Tensor; N],
    cuda: impl FnOnce([CudaTarget<'_>; M], [CudaOperand<'_>; N]) -> Result<R>,
) -> Result<R> {
    dispatch_into(op, targets, operands, |_, _| Err(on_the_cpu(op)), cuda)
}

/// Like `cuda_kernel_into` for any number of targets and operands (the fused decode products,
/// whose weights and epilogue vary).
pub fn cuda_kernel_all_into<R>(
    op: &'static str,
    targets: &[&Tensor],
    operands: &[&Tensor],
    cuda: impl FnOnce(Vec<CudaTarget<'_>>, &[CudaOperand<'_>]) -> Result<R>,
) -> Result<R> {
    run_into(
        op,
        targets,
        operands,
        |_, _| Err(on_the_cpu(op)),
        |t, xs| cuda(t, &xs),
    )
}

fn on_the_cpu(op: &'static str) -> Error {
    Error::UnsupportedDevice {
        op,
        device: Device::Cpu,
    }
}

/// The writing dispatches' one mechanism: every tensor on one device, no operand or other target
/// sharing a target's storage (its lock would wait on the write), the operands locked for
/// reading and the targets for writing (which bumps their versions, so a backward that saved
/// one fails instead of reading the new values), then the kernel of that device.
fn run_into<R>(
    op: &'static str,
    targets: &[&Tensor],
    operands: &[&Tensor],
    cpu: impl FnOnce(Vec<CpuTarget<'_>>, Vec<CpuOperand<'_>>) -> Result<R>,
    cuda: impl FnOnce(Vec<CudaTarget<'_>>, Vec<CudaOperand<'_>>) -> Result<R>,
) -> Result<R> {
    // The decode products write caches only in their rotary form: no target is fine.
    let Some(first) = targets.first().or(operands.first()) else {
        return Err(Error::invalid(op, "needs at least one operand"));
    };
    for t in targets.iter().chain(operands).skip(1) {
        first.check_same_device(op, t)?;
    }
    for (i, target) in targets.iter().enumerate() {
        if targets[i + 1..].iter().any(|t| t.shares_storage(target)) {
            return Err(Error::invalid(
                op,
                "two of the tensors it writes share storage",
            ));
        }
        if operands.iter().any(|t| t.shares_storage(target)) {
            return Err(Error::invalid(
                op,
                "an operand shares the target's storage; write from a copy",
            ));
        }
    }
    let guards: Vec<_> = operands.iter().map(|t| t.storage()).collect();
    let mut written: Vec<_> = targets.iter().map(|t| t.storage_cell().write()).collect();
    let moved = || Error::invalid(op, "an operand moved to another device during the op");
    match first.device() {
        Device::Cpu => {
            let views = guards
                .iter()
                .zip(operands)
                .map(|(g, t)| match &**g {
                    Storage::Cpu(s) => Ok((s, t.layout())),
                    _ => Err(moved()),
                })
                .collect::<Result<Vec<_>>>()?;
            let dsts = written
                .iter_mut()
                .zip(targets)
                .map(|(g, t)| match &mut **g {
                    Storage::Cpu(s) => Ok((s, t.layout())),
                    _ => Err(moved()),
                })
                .collect::<Result<Vec<_>>>()?;
            cpu(dsts, views)
        }
        Device::Cuda(_) => {
            let views = guards
                .iter()
                .zip(operands)
                .map(|(g, t)| match &**g {
                    Storage::Cuda(s) => Ok((s, t.layout())),
                    _ => Err(moved()),
                })
                .collect::<Result<Vec<_>>>()?;
            let dsts = written
                .iter_mut()
                .zip(targets)
                .map(|(g, t)| match &mut **g {
                    Storage::Cuda(s) => Ok((s, t.layout())),
                    _ => Err(moved()),
                })
                .collect::<Result<Vec<_>>>()?;
            cuda(dsts, views).map_err(|e| e.in_op(op, &[], None))
        }
    }
}

/// Locks the operands' storages (after checking they share a device) and calls the kernel of
/// their backend with one view per operand, `None` where the operand is absent.
fn run<R>(
    op: &'static str,
    operands: &[Option<&Tensor>],
    cpu: impl FnOnce(Vec<Option<CpuOperand<'_>>>) -> Result<R>,
    cuda: impl FnOnce(Vec<Option<CudaOperand<'_>>>) -> Result<R>,
) -> Result<R> {
    let mut present = operands.iter().flatten();
    let Some(first) = present.next() else {
        return Err(Error::invalid(op, "needs at least one operand"));
    };
    for t in present {
        first.check_same_device(op, t)?;
    }
    let guards: Vec<_> = operands.iter().map(|t| t.map(|t| t.storage())).collect();
    let layouts = operands.iter().map(|t| t.map(Tensor::layout));
    let views = guards.iter().map(|g| g.as_deref()).zip(layouts);
    // A storage that moved device between the check and the lock is reported, not a panic.
    let moved = || Error::invalid(op, "an operand moved to another device during the op");
    match first.device() {
        Device::Cpu => {
            let views = views
                .map(|(s, l)| match (s, l) {
                    (Some(Storage::Cpu(s)), Some(l)) => Ok(Some((s, l))),
                    (None, _) => Ok(None),
                    _ => Err(moved()),
                })
                .collect::<Result<_>>()?;
            cpu(views)
        }
        Device::Cuda(_) => {
            let views = views
                .map(|(s, l)| match (s, l) {
                    (Some(Storage::Cuda(s)), Some(l)) => Ok(Some((s, l))),
                    (None, _) => Ok(None),
                    _ => Err(moved()),
                })
                .collect::<Result<_>>()?;
            // The pool's out-of-memory error knows the bytes, not the op asking for them.
            cuda(views).map_err(|e| e.in_op(op, &[], None))
        }
    }
}

fn array<T, const N: usize>(op: &'static str, v: Vec<T>) -> Result<[T; N]> {
    v.try_into()
        .map_err(|_| Error::invalid(op, "wrong number of operands"))
}

fn present<T, const N: usize>(op: &'static str, v: Vec<Option<T>>) -> Result<[T; N]> {
    array(op, v.into_iter().flatten().collect())
}
