//! softmax and log_softmax along any dim, each one node with a fused backward.

use super::backward_fn;
use super::dispatch::dispatch;
use crate::autograd::SavedTensor;
use crate::backend::cpu::softmax as cpu;
use crate::backend::cuda::softmax as cuda;
use crate::layout::resolve_dim;
use crate::{DType, Result, Tensor};

impl Tensor {
    /// Moves `dim` last and makes the view contiguous, so kernels see rows.
    /// The result owns its whole storage from offset 0, since the CPU kernel reads the storage
    /// as rows (a narrowed view is contiguous but starts elsewhere).
    fn rows_along(&self, dim: usize) -> Result<Tensor> {
        let last = self.rank() - 1;
        crate::autograd::no_grad(|| {
            let rows = if dim == last {
                self.contiguous()?
            } else {
                self.transpose(dim as isize, last as isize)?.contiguous()?
            };
            if rows.layout().offset() == 0 && rows.storage().len() == rows.numel() {
                Ok(rows)
            } else {
                rows.contiguous_copy()
            }
        })
    }

    fn softmax_impl(&self, dim: isize, log: bool) -> Result<Tensor> {
        let name = if log { "log_softmax" } else { "softmax" };
        let x = if self.dtype().is_float() {
            self.clone()
        } else {
            self.to_dtype(DType::F32)?
        };
        if x.rank() == 0 {
            return x.unsqueeze(0)?.softmax_impl(0, log)?.squeeze(0);
        }
        let d = resolve_dim(name, dim, x.rank())?;
        let last = x.rank() - 1;
        let rows = x.rows_along(d)?;
        let cols = x.shape()[d];
        let storage = dispatch(
            name,
            [&rows],
            |[(s, _)]| Ok(cpu::softmax(s, cols, log).into()),
            |[(s, l)]| Ok(cuda::softmax(s, l, cols, log)?.into()),
        )?;
        let y_rows = Tensor::from_storage(storage, rows.shape())?;
        let y = if d == last {
            y_rows.clone()
        } else {
            y_rows.transpose(d as isize, last as isize)?
        };
        Ok(y.recorded(&[&x], || {
            let saved = SavedTensor::new(name, &y_rows);
            backward_fn(name, move |g, _| {
                let g_rows = g.rows_along(d)?;
                let y_rows = saved.get()?;
                let g_rows = g_rows.to_dtype(y_rows.dtype())?;
                let storage = dispatch(
                    name,
                    [y_rows, &g_rows],
                    |[(ys, _), (gs, _)]| Ok(cpu::softmax_backward(ys, gs, cols, log).into()),
                    |[(ys, ly), (gs, lg)]| {
                        Ok(cuda::softmax_backward(ys, ly, gs, lg, cols, log)?.into())
                    },
                )?;
                let dx = Tensor::from_storage(storage, y_rows.shape())?;
                Ok(vec![Some(if d == last {
                    dx
                } else {
                    dx.transpose(d as isize, last as isize)?.contiguous()?
                })])
            })
        }))
    }

    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        self.softmax_impl(dim, false)
    }

    pub fn log_softmax(&self, dim: isize) -> Result<Tensor> {
        self.softmax_impl(dim, true)
    }
}
