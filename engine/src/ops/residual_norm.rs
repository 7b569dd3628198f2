//! A residual add and the RMSNorm after it as one op: s = x + addend, and s normed in a chosen
//! dtype. A pre-norm decoder adds each layer's output to its residual stream and norms the
//! stream for the next products. On CUDA one kernel reads the stream and the output once and
//! writes both results; its backward adds the gradient the sum got from its other uses into
//! the norm's own, and writes the addend's gradient in the addend's dtype. Apart, the add, the
//! sum of the two gradients and the cast of the addend's gradient each take a pass over the
//! stream.
//!
//! Elsewhere (the CPU, long rows, dtypes the kernels do not pair) it is the add, then
//! `rms_norm_as`: the same values, since the kernel rounds the sum to x's dtype as the add does.

use super::dispatch::{cuda_kernel, dispatch_optional, CudaOperand};
use super::grad_if;
use crate::autograd::{no_grad, Backward, SavedTensor};
use crate::backend::cuda::norm as cuda;
use crate::backend::spec::NormSpec;
use crate::{DType, Device, Error, Result, Tensor};

const OP: &str = "add_rms_norm";

impl Tensor {
    /// (self + addend, rms_norm(self + addend, weight, eps) in `dtype`), as the add and then
    /// `rms_norm_as` compute them. self and addend have one shape; weight is [last dim].
    pub fn add_rms_norm_as(
        &self,
        addend: &Tensor,
        weight: &Tensor,
        eps: f64,
        dtype: DType,
    ) -> Result<(Tensor, Tensor)> {
        if let Some(spec) = fused_spec(self, addend, weight, eps, dtype) {
            return fused(self, addend, weight, spec, dtype);
        }
        let sum = self.add(addend)?;
        let normed = sum.rms_norm_as(Some(weight), eps, dtype)?;
        Ok((sum, normed))
    }
}

/// The norm's spec when the kernels take this call: one CUDA device, contiguous rows, the
/// addend in the output's dtype and summing to x's dtype, a weight over the last dim.
fn fused_spec(
    x: &Tensor,
    addend: &Tensor,
    weight: &Tensor,
    eps: f64,
    dtype: DType,
) -> Option<NormSpec> {
    let cols = *x.shape().last()?;
    let fits = matches!(x.device(), Device::Cuda(_))
        && addend.device() == x.device()
        && weight.device() == x.device()
        && x.dtype().is_float()
        && addend.dtype() == dtype
        && weight.dtype().is_float()
        && x.dtype().promote(dtype) == x.dtype()
        && addend.shape() == x.shape()
        && weight.shape() == [cols]
        && x.is_contiguous()
        && addend.is_contiguous()
        && x.numel() > 0
        && eps.is_finite()
        && eps >= 0.0
        && cuda::adds_in_kernel(cols, x.dtype(), dtype);
    fits.then(|| NormSpec {
        rows: x.numel() / cols,
        cols,
        eps,
        rms: true,
    })
}

fn fused(
    x: &Tensor,
    addend: &Tensor,
    weight: &Tensor,
    spec: NormSpec,
    dtype: DType,
) -> Result<(Tensor, Tensor)> {
    let w = no_grad(|| weight.to_dtype(x.dtype().compute_dtype())?.contiguous())?;
    let out = cuda_kernel(OP, [x, addend, &w], |[x, a, w]| {
        let (xs, xl) = x;
        cuda::norm_forward(
            xs,
            xl.offset(),
            Some(ptr(a)),
            Some(ptr(w)),
            None,
            spec,
            dtype,
        )
    })?;
    let sum_storage = out
        .sum
        .ok_or_else(|| Error::invalid(OP, "the kernel returned no sum"))?;
    let sum = Tensor::from_storage(sum_storage.into(), x.shape())?;
    let normed = Tensor::from_storage(out.y.into(), x.shape())?;
    let (mean, rstd) = (
        Tensor::from_storage(out.mean.into(), &[spec.rows])?,
        Tensor::from_storage(out.rstd.into(), &[spec.rows])?,
    );
    let saved_sum = SavedTensor::new(OP, &sum);
    let outputs = Tensor::recorded_outputs(vec![sum, normed], &[x, addend, weight], || {
        AddNormBackward {
            sum: saved_sum,
            weight: SavedTensor::new(OP, &w),
            mean,
            rstd,
            spec,
            weight_dtype: weight.dtype(),
        }
    });
    let [sum, normed] = <[Tensor; 2]>::try_from(outputs)
        .map_err(|_| Error::invalid(OP, "two outputs were recorded as another count"))?;
    Ok((sum, normed))
}

fn ptr((s, l): CudaOperand<'_>) -> u64 {
    s.ptr_at(l.offset())
}

struct AddNormBackward {
    sum: SavedTensor,
    /// The weight in the compute dtype, as the kernels read it.
    weight: SavedTensor,
    mean: Tensor,
    rstd: Tensor,
    spec: NormSpec,
    weight_dtype: DType,
}

impl Backward for AddNormBackward {
    fn name(&self) -> &'static str {
        OP
    }

    fn backward(&self, _grad: &Tensor, _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        Err(Error::Backward(format!(
            "`{OP}` has two outputs and takes their gradients together"
        )))
    }

    /// grads: the sum's and the normed output's; needs: x, the addend, the weight.
    fn backward_outputs(
        &self,
        grads: &[Option<Tensor>],
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let ([dsum, dnormed], [need_x, need_addend, need_w]) = (grads, needs) else {
            return Err(Error::Backward(format!(
                "`{OP}` got {} gradients for 2 outputs and {} needs for 3 inputs",
                grads.len(),
                needs.len()
            )));
        };
        let sum = self.sum.get()?;
        let Some(g) = dnormed else {
            // Only the sum was used: its gradient is both inputs' own.
            let d = dsum
                .as_ref()
                .ok_or_else(|| Error::Backward(format!("`{OP}` received no gradient")))?;
            return Ok(vec![
                grad_if(*need_x, || Ok(d.clone()))?,
                grad_if(*need_addend, || Ok(d.clone()))?,
                None,
            ]);
        };
        let g = g.contiguous()?;
        let dsum = dsum.as_ref().map(Tensor::contiguous).transpose()?;
        let w = self.weight.get()?;
        let spec = self.spec;
        let operands = [
            Some(sum),
            Some(&g),
            Some(w),
            Some(&self.mean),
            Some(&self.rstd),
            dsum.as_ref(),
        ];
        let grads = dispatch_optional(
            OP,
            operands,
            |_| {
                Err(Error::UnsupportedDevice {
                    op: OP,
                    device: Device::Cpu,
                })
            },
            |[s, g, w, mean, rstd, dsum]| {
                let (Some(s), Some(g), Some(w), Some((mean, _)), Some((rstd, _))) =
                    (s, g, w, mean, rstd)
                else {
                    return Err(Error::invalid(OP, "an operand of the backward is missing"));
                };
                let inputs = cuda::BackwardInputs {
                    x: ptr(s),
                    g: ptr(g),
                    g_dtype: g.0.dtype(),
                    w: Some(ptr(w)),
                    mean,
                    rstd,
                    dsum: dsum.map(ptr),
                    addend_grad: *need_addend,
                };
                cuda::norm_backward(inputs, s.0, spec, [*need_x, *need_w, false])
            },
        )?;
        let shape = sum.shape();
        let dx = match (*need_x, grads.dx) {
            (true, Some(s)) => Some(Tensor::from_storage(s.into(), shape)?),
            _ => None,
        };
        let daddend = match grads.daddend {
            Some(s) => Some(Tensor::from_storage(s.into(), shape)?),
            None => None,
        };
        let dw = match grads.dweight {
            Some(s) => {
                Some(Tensor::from_storage(s.into(), &[spec.cols])?.to_dtype(self.weight_dtype)?)
            }
            None => None,
        };
        Ok(vec![dx, daddend, dw])
    }
}
