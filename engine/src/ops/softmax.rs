//! softmax and log_softmax along any dim, each one node with a fused backward.

use super::backward_fn;
use crate::autograd::SavedTensor;
use crate::backend::cpu::softmax as cpu;
use crate::backend::Storage;
use crate::layout::resolve_dim;
use crate::{DType, Result, Tensor};

impl Tensor {
    /// Moves `dim` last and makes the view contiguous, so kernels see rows.
    fn rows_along(&self, dim: usize) -> Result<Tensor> {
        let last = self.rank() - 1;
        crate::autograd::no_grad(|| {
            if dim == last {
                self.contiguous()
            } else {
                self.transpose(dim as isize, last as isize)?.contiguous()
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
        let storage = rows.with_cpu(name, |s, _| Storage::Cpu(cpu::softmax(s, cols, log)))?;
        let y_rows = Tensor::from_storage(storage, rows.shape())?;
        let saved = SavedTensor::new(name, &y_rows);
        // Move, not clone: `recorded` needs the only handle to the output.
        let y = if d == last {
            y_rows
        } else {
            y_rows.transpose(d as isize, last as isize)?
        };
        Ok(y.recorded(&[&x], move || {
            backward_fn(name, move |g, _| {
                let g_rows = g.rows_along(d)?;
                let y_rows = saved.get()?;
                let g_rows = g_rows.to_dtype(y_rows.dtype())?;
                let storage = y_rows.with_cpu(name, |ys, _| {
                    g_rows.with_cpu(name, |gs, _| {
                        Storage::Cpu(cpu::softmax_backward(ys, gs, cols, log))
                    })
                })??;
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

#[cfg(test)]
mod tests {
    use crate::Tensor;

    #[test]
    fn log_softmax_along_the_last_dim_records_a_backward_instead_of_panicking() {
        let x = Tensor::from_vec(vec![1f32, 2., 3., 0.], &[2, 2])
            .unwrap()
            .requires_grad_()
            .unwrap();
        // Row sums of softmax are 1, so the gradient of sum(softmax) is zero.
        x.softmax(-1).unwrap().sum().unwrap().backward().unwrap();
        let g = x.grad().unwrap().to_vec_f32().unwrap();
        assert!(g.iter().all(|v| v.abs() < 1e-6), "{g:?}");
        let y = x.log_softmax(-1).unwrap();
        assert!(y.grad_fn().is_some());
    }
}
