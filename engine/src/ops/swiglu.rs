//! swiglu: silu(gate) * up, the gating of LLaMA's feed-forward, as one node.
//!
//! On CUDA one kernel computes it and one its backward (both gradients from g, u and dy), where
//! the composition runs silu, mul and, backward, two muls, silu's derivative and another mul.
//! The CPU runs the composition.

use super::backward_fn;
use super::dispatch::cuda_kernel;
use crate::autograd::{no_grad, SavedTensor};
use crate::backend::cuda::swiglu as cuda;
use crate::backend::Storage;
use crate::{Device, Error, Result, Tensor};
use std::sync::Arc;

const OP: &str = "swiglu";

impl Tensor {
    /// silu(self) * up for a gate and an up projection of one shape and dtype.
    pub fn swiglu(&self, up: &Tensor) -> Result<Tensor> {
        self.check_float(OP)?;
        check_gate_up(OP, self, up)?;
        match self.device() {
            Device::Cuda(_) => fused(self, up),
            Device::Cpu => self.silu()?.mul(up),
        }
    }
}

/// A gate and an up projection on one device, of one shape and dtype; `op` names the caller.
pub(crate) fn check_gate_up(op: &'static str, gate: &Tensor, up: &Tensor) -> Result<()> {
    gate.check_same_device(op, up)?;
    if gate.shape() != up.shape() || gate.dtype() != up.dtype() {
        return Err(Error::invalid(
            op,
            format!(
                "gate and up need one shape and dtype; got {} {:?} and {} {:?}",
                gate.dtype(),
                gate.shape(),
                up.dtype(),
                up.shape()
            ),
        ));
    }
    Ok(())
}

fn fused(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    // Halves of one fused product's rows are read in place; anything else is made contiguous.
    let rows = gate
        .layout()
        .as_rows()
        .filter(|r| up.layout().as_rows() == Some(*r));
    let (g, u, cols, ld) = match rows {
        Some((_, cols, ld)) => (gate.detach(), up.detach(), cols, ld),
        None => {
            let (g, u) = no_grad(|| Ok::<_, Error>((gate.contiguous()?, up.contiguous()?)))?;
            let cols = g.shape().last().copied().unwrap_or(1);
            (g, u, cols, cols)
        }
    };
    // Gate and up side by side in one buffer: their gradients go side by side too, which the
    // split that made them joins without a copy.
    let packed = ld == 2 * cols
        && Arc::ptr_eq(g.storage_cell(), u.storage_cell())
        && u.layout().offset() == g.layout().offset() + cols;
    let n = g.numel();
    let y = cuda_kernel(OP, [&g, &u], |[(gs, gl), (us, ul)]| {
        let gu = cuda::GateUp {
            gate: (gs, gl.offset()),
            up: (us, ul.offset()),
            cols,
            ld,
        };
        cuda::forward(&gu, n)
    })?;
    let shape = g.shape().to_vec();
    Tensor::from_op(Storage::Cuda(y), gate.shape(), &[gate, up], move || {
        let (sg, su) = (SavedTensor::new(OP, &g), SavedTensor::new(OP, &u));
        backward_fn(OP, move |dy, needs| {
            let (g, u) = (sg.get()?, su.get()?);
            let dy = no_grad(|| dy.to_dtype(g.dtype())?.contiguous())?;
            let grads = cuda_kernel(OP, [g, u, &dy], |[(gs, gl), (us, ul), (ds, dl)]| {
                let gu = cuda::GateUp {
                    gate: (gs, gl.offset()),
                    up: (us, ul.offset()),
                    cols,
                    ld,
                };
                cuda::backward(&gu, (ds, dl.offset()), n, packed)
            })?;
            let (dg, du) = match grads {
                cuda::GateUpGrads::Separate(dg, du) => (
                    Tensor::from_storage(Storage::Cuda(dg), &shape)?,
                    Tensor::from_storage(Storage::Cuda(du), &shape)?,
                ),
                cuda::GateUpGrads::Packed(buf) => {
                    let mut whole = shape.clone();
                    if let Some(last) = whole.last_mut() {
                        *last = 2 * cols;
                    }
                    let both = Tensor::from_storage(Storage::Cuda(buf), &whole)?;
                    let d = shape.len() as isize - 1;
                    (both.narrow(d, 0, cols)?, both.narrow(d, cols, cols)?)
                }
            };
            Ok(vec![needs[0].then_some(dg), needs[1].then_some(du)])
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swiglu_is_silu_of_the_gate_times_up() {
        let g = Tensor::from_vec(vec![-2.0f64, 0.0, 1.5], &[3]).unwrap();
        let u = Tensor::from_vec(vec![3.0f64, 4.0, -1.0], &[3]).unwrap();
        let got: Vec<f64> = g.swiglu(&u).unwrap().to_vec().unwrap();
        let silu = |x: f64| x / (1.0 + (-x).exp());
        for (i, want) in [silu(-2.0) * 3.0, 0.0, -silu(1.5)].iter().enumerate() {
            assert!((got[i] - want).abs() < 1e-12, "{got:?}");
        }
    }

    #[test]
    fn gate_and_up_of_different_shapes_are_an_error() {
        let g = Tensor::zeros(&[2, 3], crate::DType::F32, Device::Cpu).unwrap();
        let u = Tensor::zeros(&[3, 2], crate::DType::F32, Device::Cpu).unwrap();
        let e = g.swiglu(&u).unwrap_err().to_string();
        assert!(
            e.contains("one shape and dtype") && e.contains("[3, 2]"),
            "{e}"
        );
    }
}
