//! `lerp_all_`: x = lerp(x, end, weight) for many tensors at once, as torch._foreach_lerp_,
//! for moving averages of a model's weights (an EMA). On one CUDA device it is one launch per
//! table of tensors; elsewhere, or for tensors the table cannot take, a few ops a tensor.

use super::fused::{cuda_ordinal, device_slice, written_slice};
use crate::backend::cuda::{self, optim::lerp_all};
use crate::{no_grad, Error, Result, Tensor};

/// x = lerp(x, end, weight) for each pair, in place: `x + weight * (end - x)` for weights
/// below 0.5 and `end - (end - x) * (1 - weight)` otherwise (exact at 0 and 1), as torch.
/// Each `end` must have its `x`'s shape.
pub fn lerp_all_(xs: &[Tensor], ends: &[Tensor], weight: f64) -> Result<()> {
    if xs.len() != ends.len() {
        return Err(Error::invalid(
            "lerp_all_",
            format!("{} tensors but {} ends", xs.len(), ends.len()),
        ));
    }
    for (x, e) in xs.iter().zip(ends) {
        if x.shape() != e.shape() {
            return Err(Error::ShapeMismatch {
                op: "lerp_all_",
                lhs: x.shape().to_vec(),
                rhs: e.shape().to_vec(),
            });
        }
        x.check_inplace("lerp_all_")?;
    }
    let fused = |x: &Tensor, e: &Tensor| {
        x.dtype() == e.dtype()
            && x.dtype().is_float()
            && x.is_contiguous()
            && e.is_contiguous()
            && !x.shares_storage(e)
    };
    let all: Vec<Tensor> = xs.iter().chain(ends).cloned().collect();
    match cuda_ordinal(&all) {
        Some(ordinal) if xs.iter().zip(ends).all(|(x, e)| fused(x, e)) => {
            let dev = cuda::device(ordinal)?;
            let pairs = xs
                .iter()
                .zip(ends)
                .map(|(x, e)| Ok((device_slice(e)?, written_slice(x)?.ptr)))
                .collect::<Result<Vec<_>>>()?;
            // SAFETY: each end and x is a live contiguous tensor of the same size and dtype on
            // `dev`, held by the caller until after the launch is queued; they do not share a
            // storage.
            unsafe { lerp_all(&dev, &pairs, weight) }
        }
        _ => no_grad(|| {
            xs.iter()
                .zip(ends)
                .try_for_each(|(x, e)| lerp_(x, &e.to_dtype(x.dtype())?, weight))
        }),
    }
}

/// One tensor's lerp by tensor ops, in the same two forms.
fn lerp_(x: &Tensor, end: &Tensor, weight: f64) -> Result<()> {
    let diff = end.sub(x)?;
    if weight < 0.5 {
        x.add_(&diff.mul_scalar(weight)?)
    } else {
        x.copy_(&end.sub(&diff.mul_scalar(1.0 - weight)?)?)
    }
}
