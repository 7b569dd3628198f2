//! Ops: one file per family, each holding the public functions (shape and dtype rules, backend
//! dispatch) with their backward written beside them in terms of tensor ops.

pub mod attention;
pub mod conv;
pub mod elementwise;
pub mod index;
pub mod kinds;
pub mod linear_loss;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod rope;
pub mod softmax;
pub mod swiglu;
pub mod table;
pub mod view;

use crate::autograd::Backward;
use crate::backend::{CpuStorage, CudaStorage, Storage};
use crate::{Error, Layout, Result, Tensor};

/// A backward written as a closure next to its forward.
pub(crate) struct FnBackward<F> {
    name: &'static str,
    f: F,
}

impl<F> Backward for FnBackward<F>
where
    F: Fn(&Tensor, &[bool]) -> Result<Vec<Option<Tensor>>> + Send + Sync,
{
    fn name(&self) -> &'static str {
        self.name
    }
    fn backward(&self, grad: &Tensor, needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        (self.f)(grad, needs)
    }
}

pub(crate) fn backward_fn<F>(name: &'static str, f: F) -> FnBackward<F>
where
    F: Fn(&Tensor, &[bool]) -> Result<Vec<Option<Tensor>>> + Send + Sync,
{
    FnBackward { name, f }
}

/// Computes `needs[i]` gradients lazily: `f` runs only when the input needs a gradient.
pub(crate) fn grad_if(need: bool, f: impl FnOnce() -> Result<Tensor>) -> Result<Option<Tensor>> {
    if need {
        f().map(Some)
    } else {
        Ok(None)
    }
}

impl Tensor {
    /// Runs a CPU kernel over this tensor's storage and layout; a CUDA tensor is an error
    /// naming the op (used by the few ops that have no CUDA kernel).
    pub(crate) fn with_cpu<R>(
        &self,
        op: &'static str,
        f: impl FnOnce(&CpuStorage, &Layout) -> R,
    ) -> Result<R> {
        let storage = self.storage();
        match &*storage {
            Storage::Cpu(s) => Ok(f(s, self.layout())),
            Storage::Cuda(_) => Err(Error::UnsupportedDevice {
                op,
                device: self.device(),
            }),
        }
    }

    /// Runs the op's kernel for whichever backend holds this tensor.
    pub(crate) fn dispatch(
        &self,
        cpu: impl FnOnce(&CpuStorage, &Layout) -> CpuStorage,
        cuda: impl FnOnce(&CudaStorage, &Layout) -> Result<CudaStorage>,
    ) -> Result<Storage> {
        let storage = self.storage();
        Ok(match &*storage {
            Storage::Cpu(s) => Storage::Cpu(cpu(s, self.layout())),
            Storage::Cuda(s) => Storage::Cuda(cuda(s, self.layout())?),
        })
    }

    /// Like `dispatch` for an op of two tensors on one device.
    pub(crate) fn dispatch2(
        op: &'static str,
        a: &Tensor,
        b: &Tensor,
        cpu: impl FnOnce(&CpuStorage, &CpuStorage) -> CpuStorage,
        cuda: impl FnOnce(&CudaStorage, &CudaStorage) -> Result<CudaStorage>,
    ) -> Result<Storage> {
        a.check_same_device(op, b)?;
        let (ga, gb) = (a.storage(), b.storage());
        Ok(match (&*ga, &*gb) {
            (Storage::Cpu(x), Storage::Cpu(y)) => Storage::Cpu(cpu(x, y)),
            (Storage::Cuda(x), Storage::Cuda(y)) => Storage::Cuda(cuda(x, y)?),
            _ => unreachable!("devices were checked equal"),
        })
    }

    /// Like `dispatch` for an op of three tensors on one device.
    pub(crate) fn dispatch3(
        op: &'static str,
        [a, b, c]: [&Tensor; 3],
        cpu: impl FnOnce(&CpuStorage, &CpuStorage, &CpuStorage) -> CpuStorage,
        cuda: impl FnOnce(&CudaStorage, &CudaStorage, &CudaStorage) -> Result<CudaStorage>,
    ) -> Result<Storage> {
        a.check_same_device(op, b)?;
        a.check_same_device(op, c)?;
        let (ga, gb, gc) = (a.storage(), b.storage(), c.storage());
        Ok(match (&*ga, &*gb, &*gc) {
            (Storage::Cpu(x), Storage::Cpu(y), Storage::Cpu(z)) => Storage::Cpu(cpu(x, y, z)),
            (Storage::Cuda(x), Storage::Cuda(y), Storage::Cuda(z)) => Storage::Cuda(cuda(x, y, z)?),
            _ => unreachable!("devices were checked equal"),
        })
    }

    /// The two operands on one device. As in PyTorch, a 0-d CPU tensor (a scalar) may meet a
    /// tensor on any device: it moves there. Any other mix is an error naming both devices.
    pub(crate) fn colocated(op: &'static str, a: &Tensor, b: &Tensor) -> Result<(Tensor, Tensor)> {
        match (a.device(), b.device()) {
            (da, db) if da == db => Ok((a.clone(), b.clone())),
            (crate::Device::Cpu, db) if a.rank() == 0 => Ok((a.to_device(db)?, b.clone())),
            (da, crate::Device::Cpu) if b.rank() == 0 => Ok((a.clone(), b.to_device(da)?)),
            _ => a.check_same_device(op, b).map(|_| (a.clone(), b.clone())),
        }
    }

    pub(crate) fn check_same_device(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.device() != other.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device(),
            });
        }
        Ok(())
    }

    pub(crate) fn check_float(&self, op: &'static str) -> Result<()> {
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype(),
                detail: ": needs a float tensor".into(),
            });
        }
        Ok(())
    }
}
