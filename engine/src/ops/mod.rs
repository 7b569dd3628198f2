//! Ops: one file per family, each holding the public functions (shape and dtype rules, backend
//! dispatch) with their backward written beside them in terms of tensor ops.

pub mod conv;
pub mod elementwise;
pub mod index;
pub mod kinds;
pub mod loss;
pub mod matmul;
pub mod pool;
pub mod reduce;
pub mod softmax;
pub mod table;
pub mod view;

use crate::autograd::Backward;
use crate::backend::{CpuStorage, Storage};
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
    /// Runs a CPU kernel over this tensor's storage and layout.
    pub(crate) fn with_cpu<R>(
        &self,
        _op: &'static str,
        f: impl FnOnce(&CpuStorage, &Layout) -> R,
    ) -> Result<R> {
        let storage = self.storage();
        match &*storage {
            Storage::Cpu(s) => Ok(f(s, self.layout())),
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
