//! Reductions over any dims with keepdim: sum, mean, max, min, argmax, argmin, var, std, norm,
//! all, any, logsumexp.

use super::backward_fn;
use super::dispatch::dispatch;
use crate::autograd::SavedTensor;
use crate::backend::cpu::reduce as cpu;
use crate::backend::cuda::reduce as cuda;
use crate::backend::spec::ReduceOp;
use crate::layout::resolve_dim;
use crate::{DType, Error, Result, Tensor};

/// Sorted, deduplicated dims; an empty list means every dim.
fn resolve_dims(op: &'static str, dims: &[isize], rank: usize) -> Result<Vec<usize>> {
    if dims.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut out: Vec<usize> = dims
        .iter()
        .map(|&d| resolve_dim(op, d, rank))
        .collect::<Result<_>>()?;
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn reduced_shape(shape: &[usize], dims: &[usize], keepdim: bool) -> Vec<usize> {
    (0..shape.len())
        .filter_map(|i| {
            if dims.contains(&i) {
                keepdim.then_some(1)
            } else {
                Some(shape[i])
            }
        })
        .collect()
}

impl Tensor {
    fn reduce_raw(&self, dims: &[usize], op: ReduceOp, name: &'static str) -> Result<Tensor> {
        if matches!(
            op,
            ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin
        ) && dims.iter().any(|&d| self.shape()[d] == 0)
        {
            return Err(Error::invalid(
                name,
                format!(
                    "cannot reduce an empty dimension of shape {:?}",
                    self.shape()
                ),
            ));
        }
        let storage = dispatch(
            name,
            [self],
            |[(s, l)]| Ok(cpu::reduce(s, l, dims, op).into()),
            |[(s, l)]| Ok(cuda::reduce(s, l, dims, op)?.into()),
        )?;
        Tensor::from_storage(storage, &reduced_shape(self.shape(), dims, true))
    }

    /// Sum over `dims` (all dims when empty). Integer and bool sums give I64, as in PyTorch.
    pub fn sum_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let d = resolve_dims("sum", dims, self.rank())?;
        let out = self.reduce_raw(&d, ReduceOp::Sum, "sum")?;
        let out = if keepdim {
            out
        } else {
            out.reshape_to(&reduced_shape(self.shape(), &d, false))?
        };
        let in_shape = self.shape().to_vec();
        let kept = reduced_shape(self.shape(), &d, true);
        Ok(out.recorded(&[self], move || {
            backward_fn("sum", move |g, _| {
                Ok(vec![Some(
                    g.reshape_to(&kept)?.expand(&in_shape)?.contiguous()?,
                )])
            })
        }))
    }

    pub fn sum(&self) -> Result<Tensor> {
        self.sum_dims(&[], false)
    }

    pub fn mean_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let d = resolve_dims("mean", dims, self.rank())?;
        let count: usize = d.iter().map(|&i| self.shape()[i]).product();
        let x = if self.dtype().is_float() {
            self.clone()
        } else {
            self.to_dtype(DType::F32)?
        };
        x.sum_dims(dims, keepdim)?.affine(1.0 / count as f64, 0.0)
    }

    pub fn mean(&self) -> Result<Tensor> {
        self.mean_dims(&[], false)
    }

    fn extreme_dims(
        &self,
        dims: &[isize],
        keepdim: bool,
        op: ReduceOp,
        name: &'static str,
    ) -> Result<Tensor> {
        let d = resolve_dims(name, dims, self.rank())?;
        let kept = self.reduce_raw(&d, op, name)?;
        let out = if keepdim {
            kept.clone()
        } else {
            kept.reshape_to(&reduced_shape(self.shape(), &d, false))?
        };
        Ok(out.recorded(&[self], || {
            let (x, m) = (SavedTensor::new(name, self), SavedTensor::new(name, &kept));
            let kept_shape = kept.shape().to_vec();
            backward_fn(name, move |g, _| {
                // Ties share the gradient evenly.
                let hits = x.get()?.eq(m.get()?)?.to_dtype(g.dtype())?;
                let count =
                    hits.sum_dims(&d.iter().map(|&i| i as isize).collect::<Vec<_>>(), true)?;
                Ok(vec![Some(
                    g.reshape_to(&kept_shape)?.div(&count)?.mul(&hits)?,
                )])
            })
        }))
    }

    pub fn max_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.extreme_dims(dims, keepdim, ReduceOp::Max, "max")
    }

    pub fn min_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.extreme_dims(dims, keepdim, ReduceOp::Min, "min")
    }

    pub fn max(&self) -> Result<Tensor> {
        self.max_dims(&[], false)
    }

    pub fn min(&self) -> Result<Tensor> {
        self.min_dims(&[], false)
    }

    fn arg_extreme(
        &self,
        dim: Option<isize>,
        keepdim: bool,
        op: ReduceOp,
        name: &'static str,
    ) -> Result<Tensor> {
        match dim {
            None => self.flatten()?.arg_extreme(Some(0), false, op, name),
            Some(dim) => {
                let d = resolve_dim(name, dim, self.rank())?;
                let out = self.reduce_raw(&[d], op, name)?;
                if keepdim {
                    Ok(out)
                } else {
                    out.reshape_to(&reduced_shape(self.shape(), &[d], false))
                }
            }
        }
    }

    /// Index of the largest value along `dim` (over the flattened tensor when `None`).
    pub fn argmax(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        self.arg_extreme(dim, keepdim, ReduceOp::ArgMax, "argmax")
    }

    pub fn argmin(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        self.arg_extreme(dim, keepdim, ReduceOp::ArgMin, "argmin")
    }

    /// Variance with Bessel's correction when `unbiased`, as torch.var.
    pub fn var_dims(&self, dims: &[isize], unbiased: bool, keepdim: bool) -> Result<Tensor> {
        let d = resolve_dims("var", dims, self.rank())?;
        let n: usize = d.iter().map(|&i| self.shape()[i]).product();
        let denom = if unbiased { n as f64 - 1.0 } else { n as f64 };
        let centered = self.sub(&self.mean_dims(dims, true)?)?;
        centered
            .square()?
            .sum_dims(dims, keepdim)?
            .affine(1.0 / denom, 0.0)
    }

    /// The standard deviation, the square root of `var_dims` (torch.std).
    pub fn std_dims(&self, dims: &[isize], unbiased: bool, keepdim: bool) -> Result<Tensor> {
        self.var_dims(dims, unbiased, keepdim)?.sqrt()
    }

    /// The p-norm over `dims` (torch.linalg.vector_norm): 2 the Euclidean length, 1 the sum of
    /// magnitudes, infinity the largest magnitude, any other p > 0 (sum |x|^p)^(1/p).
    pub fn norm_dims(&self, p: f64, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let magnitude = self.abs()?;
        if p == f64::INFINITY {
            return magnitude.max_dims(dims, keepdim);
        }
        if p.is_nan() || p <= 0.0 {
            return Err(Error::invalid(
                "norm",
                format!("p must be positive or infinity, got {p}"),
            ));
        }
        match p {
            1.0 => magnitude.sum_dims(dims, keepdim),
            2.0 => self.square()?.sum_dims(dims, keepdim)?.sqrt(),
            _ => magnitude
                .pow_scalar(p)?
                .sum_dims(dims, keepdim)?
                .pow_scalar(1.0 / p),
        }
    }

    /// Whether every element over `dims` is non-zero (torch.all), as Bool.
    pub fn all_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.nonzero_flags()?
            .min_dims(dims, keepdim)?
            .gt_scalar(0.0)
    }

    /// Whether any element over `dims` is non-zero (torch.any), as Bool.
    pub fn any_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.nonzero_flags()?
            .max_dims(dims, keepdim)?
            .gt_scalar(0.0)
    }

    /// 1 where an element is non-zero, else 0 (U8, which the min and max reductions take).
    fn nonzero_flags(&self) -> Result<Tensor> {
        self.eq_scalar(0.0)?.logical_not()?.to_dtype(DType::U8)
    }

    /// log(sum(exp(x))) over `dims`, stable for large values.
    pub fn logsumexp(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let m = crate::autograd::no_grad(|| self.max_dims(dims, true))?;
        // A row of -inf would give inf - inf; shift by 0 there instead.
        let m = m.masked_fill(&m.abs()?.eq_scalar(f64::INFINITY)?, 0.0)?;
        let s = self.sub(&m)?.exp()?.sum_dims(dims, true)?.log()?.add(&m)?;
        if keepdim {
            Ok(s)
        } else {
            let d = resolve_dims("logsumexp", dims, self.rank())?;
            s.reshape_to(&reduced_shape(self.shape(), &d, false))
        }
    }
}
