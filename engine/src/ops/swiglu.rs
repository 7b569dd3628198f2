//! swiglu: silu(gate) * up, the gating of LLaMA's feed-forward, as one node.
//!
//! On CUDA one kernel computes it and one its backward (both gradients from g, u and dy), where
//! the composition runs silu, mul and, backward, two muls, silu's derivative and another mul.
//! The CPU runs the composition.

use super::backward_fn;
use crate::autograd::{no_grad, SavedTensor};
use crate::backend::cuda::swiglu as cuda;
use crate::backend::{CudaStorage, Storage};
use crate::{Device, Error, Result, Tensor};

const OP: &str = "swiglu";

impl Tensor {
    /// silu(self) * up for a gate and an up projection of one shape and dtype.
    pub fn swiglu(&self, up: &Tensor) -> Result<Tensor> {
        self.check_float(OP)?;
        self.check_same_device(OP, up)?;
        if self.shape() != up.shape() || self.dtype() != up.dtype() {
            return Err(Error::invalid(
                OP,
                format!(
                    "gate and up need one shape and dtype; got {} {:?} and {} {:?}",
                    self.dtype(),
                    self.shape(),
                    up.dtype(),
                    up.shape()
                ),
            ));
        }
        match self.device() {
            Device::Cuda(_) => fused(self, up),
            Device::Cpu => self.silu()?.mul(up),
        }
    }
}

fn cuda_of(s: &Storage) -> Result<&CudaStorage> {
    match s {
        Storage::Cuda(c) => Ok(c),
        Storage::Cpu(_) => Err(Error::invalid(OP, "operands on different backends")),
    }
}

fn fused(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    let (g, u) = no_grad(|| Ok::<_, Error>((gate.contiguous()?, up.contiguous()?)))?;
    let n = g.numel();
    let y = {
        let (gs, us) = (g.storage(), u.storage());
        cuda::forward(
            (cuda_of(&gs)?, g.layout().offset()),
            (cuda_of(&us)?, u.layout().offset()),
            n,
        )?
    };
    let shape = g.shape().to_vec();
    Tensor::from_op(Storage::Cuda(y), gate.shape(), &[gate, up], move || {
        let (sg, su) = (SavedTensor::new(OP, &g), SavedTensor::new(OP, &u));
        backward_fn(OP, move |dy, needs| {
            let (g, u) = (sg.get()?, su.get()?);
            let dy = no_grad(|| dy.to_dtype(g.dtype())?.contiguous())?;
            let (dg, du) = {
                let (gs, us, ds) = (g.storage(), u.storage(), dy.storage());
                cuda::backward(
                    (cuda_of(&gs)?, g.layout().offset()),
                    (cuda_of(&us)?, u.layout().offset()),
                    (cuda_of(&ds)?, dy.layout().offset()),
                    n,
                )?
            };
            let wrap = |s: CudaStorage, need: bool| -> Result<Option<Tensor>> {
                need.then(|| Tensor::from_storage(Storage::Cuda(s), &shape))
                    .transpose()
            };
            Ok(vec![wrap(dg, needs[0])?, wrap(du, needs[1])?])
        })
    })
}
