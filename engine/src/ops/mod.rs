//! Ops: one file per family, each holding the public functions (shape and dtype rules, backend
//! dispatch) with their backward written beside them in terms of tensor ops.

pub mod attention;
pub mod batch_norm;
pub mod bias_act;
pub mod bincount;
pub mod constant_table;
pub mod conv;
pub mod conv_transpose;
pub mod decode_attention;
// The one way an op reaches a backend lives under the tensor, which in-place writes use too;
// ops name it here as they always have.
pub use crate::tensor::dispatch;
pub mod einsum;
pub mod elementwise;
pub mod expert_routing;
pub mod fused_linear;
pub mod group_norm;
pub mod grouped_matmul;
pub(crate) mod host_keys;
pub mod index;
pub mod interpolate;
pub mod linear_loss;
pub mod loss;
pub mod matmul;
pub mod nf4;
pub mod nms;
pub mod norm;
pub mod pool;
pub mod pre_norm;
pub mod product_weight;
pub mod quant_matmul;
pub mod rearrange;
pub mod reduce;
pub mod region;
pub mod residual_norm;
pub mod rope;
pub mod scan;
pub mod softmax;
pub mod sort;
pub mod swiglu;
pub mod table;
pub mod topk;
pub mod unique;
pub mod view;

use crate::autograd::Backward;
use crate::{Error, Result, Tensor};

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
