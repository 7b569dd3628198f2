//! max_pool2d, avg_pool2d and nearest upsampling on [N, C, H, W]. The CPU runs its kernels on
//! host copies; CUDA tensors stay on the device, forward and backward.

use super::backward_fn;
use super::index::cuda_of;
use crate::backend::cpu::pool::{self as cpu, PoolGeometry};
use crate::backend::{cuda, CudaStorage, Storage};
use crate::{DType, Device, Error, Layout, Result, Tensor};

fn geometry(
    op: &'static str,
    shape: &[usize],
    kernel: (usize, usize),
    stride: (usize, usize),
    padding: (usize, usize),
) -> Result<PoolGeometry> {
    if shape.len() != 4 {
        return Err(Error::invalid(
            op,
            format!("needs [N, C, H, W], got {shape:?}"),
        ));
    }
    if kernel.0 == 0 || kernel.1 == 0 || stride.0 == 0 || stride.1 == 0 {
        return Err(Error::invalid(
            op,
            format!("kernel {kernel:?} and stride {stride:?} must be positive"),
        ));
    }
    if 2 * padding.0 > kernel.0 || 2 * padding.1 > kernel.1 {
        return Err(Error::invalid(
            op,
            format!("padding {padding:?} must be at most half the kernel {kernel:?}"),
        ));
    }
    let out = |size: usize, k: usize, p: usize, s: usize| {
        (size + 2 * p).checked_sub(k).map(|r| r / s + 1)
    };
    let (Some(ho), Some(wo)) = (
        out(shape[2], kernel.0, padding.0, stride.0),
        out(shape[3], kernel.1, padding.1, stride.1),
    ) else {
        return Err(Error::invalid(
            op,
            format!(
                "kernel {kernel:?} is larger than the padded input {:?}",
                &shape[2..]
            ),
        ));
    };
    Ok(PoolGeometry {
        planes: shape[0] * shape[1],
        h: shape[2],
        w: shape[3],
        kernel,
        stride,
        padding,
        ho,
        wo,
    })
}

/// Runs a kernel on the f32 (or f64) values of `t` and returns a tensor of t's dtype.
fn on_floats(
    t: &Tensor,
    shape: &[usize],
    f32k: impl FnOnce(&[f32]) -> Vec<f32>,
    f64k: impl FnOnce(&[f64]) -> Vec<f64>,
) -> Result<Tensor> {
    if t.dtype() == DType::F64 {
        Tensor::from_vec(f64k(&t.to_vec::<f64>()?), shape)
    } else {
        Tensor::from_vec(f32k(&t.to_vec::<f32>()?), shape)?.to_dtype(t.dtype())
    }
}

/// A tensor of `shape` made by a CUDA kernel from `t`'s storage and layout.
pub(super) fn cuda_kernel(
    op: &'static str,
    t: &Tensor,
    shape: &[usize],
    f: impl FnOnce(&CudaStorage, &Layout) -> Result<CudaStorage>,
) -> Result<Tensor> {
    let storage = {
        let guard = t.storage();
        f(cuda_of(op, t, &guard)?, t.layout())?
    };
    Tensor::from_storage(Storage::Cuda(storage), shape)
}

/// Where max pooling's backward finds each output's chosen input: host indices for a CPU
/// forward, an I64 device buffer for a CUDA one.
enum Argmax {
    Cpu(Vec<usize>),
    Cuda(CudaStorage),
}

impl Tensor {
    pub fn max_pool2d(
        &self,
        kernel: (usize, usize),
        stride: (usize, usize),
        padding: (usize, usize),
    ) -> Result<Tensor> {
        self.check_float("max_pool2d")?;
        let g = geometry("max_pool2d", self.shape(), kernel, stride, padding)?;
        let out_shape = [self.shape()[0], self.shape()[1], g.ho, g.wo];
        let (out, argmax) = match self.device() {
            Device::Cpu if self.dtype() == DType::F64 => {
                let (v, i) = cpu::max_pool2d(&self.to_vec::<f64>()?, &g);
                (Tensor::from_vec(v, &out_shape)?, Argmax::Cpu(i))
            }
            Device::Cpu => {
                let (v, i) = cpu::max_pool2d(&self.to_vec::<f32>()?, &g);
                let out = Tensor::from_vec(v, &out_shape)?.to_dtype(self.dtype())?;
                (out, Argmax::Cpu(i))
            }
            Device::Cuda(_) => {
                let (v, i) = {
                    let guard = self.storage();
                    cuda::pool::max_pool2d(cuda_of("max_pool2d", self, &guard)?, self.layout(), &g)?
                };
                (
                    Tensor::from_storage(Storage::Cuda(v), &out_shape)?,
                    Argmax::Cuda(i),
                )
            }
        };
        let in_shape = self.shape().to_vec();
        Ok(out.recorded(&[self], move || {
            backward_fn("max_pool2d", move |dy, _| {
                let dx = match &argmax {
                    Argmax::Cpu(argmax) => on_floats(
                        dy,
                        &in_shape,
                        |d| cpu::max_pool2d_backward(d, argmax, &g),
                        |d| cpu::max_pool2d_backward(d, argmax, &g),
                    )?,
                    Argmax::Cuda(argmax) => cuda_kernel("max_pool2d", dy, &in_shape, |s, l| {
                        cuda::pool::max_pool2d_backward(s, l, argmax, &g)
                    })?,
                };
                Ok(vec![Some(dx)])
            })
        }))
    }

    pub fn avg_pool2d(
        &self,
        kernel: (usize, usize),
        stride: (usize, usize),
        padding: (usize, usize),
    ) -> Result<Tensor> {
        self.check_float("avg_pool2d")?;
        let g = geometry("avg_pool2d", self.shape(), kernel, stride, padding)?;
        let out_shape = [self.shape()[0], self.shape()[1], g.ho, g.wo];
        let out = match self.device() {
            Device::Cpu => on_floats(
                self,
                &out_shape,
                |x| cpu::avg_pool2d(x, &g),
                |x| cpu::avg_pool2d(x, &g),
            )?,
            Device::Cuda(_) => cuda_kernel("avg_pool2d", self, &out_shape, |s, l| {
                cuda::pool::avg_pool2d(s, l, &g)
            })?,
        };
        let in_shape = self.shape().to_vec();
        Ok(out.recorded(&[self], move || {
            backward_fn("avg_pool2d", move |dy, _| {
                let dx = match dy.device() {
                    Device::Cpu => on_floats(
                        dy,
                        &in_shape,
                        |d| cpu::avg_pool2d_backward(d, &g),
                        |d| cpu::avg_pool2d_backward(d, &g),
                    )?,
                    Device::Cuda(_) => cuda_kernel("avg_pool2d", dy, &in_shape, |s, l| {
                        cuda::pool::avg_pool2d_backward(s, l, &g)
                    })?,
                };
                Ok(vec![Some(dx)])
            })
        }))
    }

    /// Nearest-neighbour upsampling of [N, C, H, W] by integer factors.
    pub fn upsample_nearest2d(&self, scale_h: usize, scale_w: usize) -> Result<Tensor> {
        self.check_float("upsample_nearest2d")?;
        let s = self.shape();
        if s.len() != 4 || scale_h == 0 || scale_w == 0 {
            return Err(Error::invalid(
                "upsample_nearest2d",
                format!(
                    "needs [N, C, H, W] and positive scales, got {s:?} and ({scale_h}, {scale_w})"
                ),
            ));
        }
        let (planes, h, w) = (s[0] * s[1], s[2], s[3]);
        let out_shape = [s[0], s[1], h * scale_h, w * scale_w];
        let (plane, scale) = ((h, w), (scale_h, scale_w));
        let out = match self.device() {
            Device::Cpu => on_floats(
                self,
                &out_shape,
                |x| cpu::upsample_nearest(x, planes, h, w, scale_h, scale_w),
                |x| cpu::upsample_nearest(x, planes, h, w, scale_h, scale_w),
            )?,
            Device::Cuda(_) => cuda_kernel("upsample_nearest2d", self, &out_shape, |st, l| {
                cuda::pool::upsample_nearest(st, l, planes, plane, scale)
            })?,
        };
        let in_shape = s.to_vec();
        Ok(out.recorded(&[self], move || {
            backward_fn("upsample_nearest2d", move |dy, _| {
                let dx = match dy.device() {
                    Device::Cpu => on_floats(
                        dy,
                        &in_shape,
                        |d| cpu::upsample_nearest_backward(d, planes, h, w, scale_h, scale_w),
                        |d| cpu::upsample_nearest_backward(d, planes, h, w, scale_h, scale_w),
                    )?,
                    Device::Cuda(_) => {
                        cuda_kernel("upsample_nearest2d", dy, &in_shape, |st, l| {
                            cuda::pool::upsample_nearest_backward(st, l, planes, plane, scale)
                        })?
                    }
                };
                Ok(vec![Some(dx)])
            })
        }))
    }
}
