//! max_pool2d, avg_pool2d and nearest upsampling on [N, C, H, W]. The CPU runs its kernels on
//! host copies; CUDA tensors stay on the device, forward and backward.

use super::backward_fn;
use super::dispatch::dispatch;
use crate::backend::cpu::floats::{on_floats, on_floats_with};
use crate::backend::cpu::pool as cpu;
use crate::backend::spec::PoolGeometry;
use crate::backend::{cuda, CudaStorage, Storage};
use crate::{Error, Layout, Result, Tensor};

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

/// A tensor of `shape` from `t` through one kernel per backend: on the CPU a kernel written for
/// f32 and f64 (`on_floats`), on CUDA one that takes the storage and layout.
fn pool_kernel(
    op: &'static str,
    t: &Tensor,
    shape: &[usize],
    f32k: impl FnOnce(&[f32]) -> Vec<f32>,
    f64k: impl FnOnce(&[f64]) -> Vec<f64>,
    cuda: impl FnOnce(&CudaStorage, &Layout) -> Result<CudaStorage>,
) -> Result<Tensor> {
    let dtype = t.dtype();
    let storage = dispatch(
        op,
        [t],
        |views| Ok(on_floats(views, dtype, |[x]| f32k(x), |[x]| f64k(x)).into()),
        |[(s, l)]| Ok(cuda(s, l)?.into()),
    )?;
    Tensor::from_storage(storage, shape)
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
        let dtype = self.dtype();
        let (out, argmax): (Storage, Argmax) = dispatch(
            "max_pool2d",
            [self],
            |views| {
                let (v, i) = on_floats_with(
                    views,
                    dtype,
                    |[x]| cpu::max_pool2d(x, &g),
                    |[x]| cpu::max_pool2d(x, &g),
                );
                Ok((v.into(), Argmax::Cpu(i)))
            },
            |[(s, l)]| {
                let (v, i) = cuda::pool::max_pool2d(s, l, &g)?;
                Ok((v.into(), Argmax::Cuda(i)))
            },
        )?;
        let out = Tensor::from_storage(out, &out_shape)?;
        let in_shape = self.shape().to_vec();
        Ok(out.recorded(&[self], move || {
            backward_fn("max_pool2d", move |dy, _| {
                // The argmax lives where the forward ran; dy arrives on the same device.
                let moved = || Error::invalid("max_pool2d", "the gradient is on another device");
                let dtype = dy.dtype();
                let dx = dispatch(
                    "max_pool2d",
                    [dy],
                    |views| match &argmax {
                        Argmax::Cpu(a) => Ok(on_floats(
                            views,
                            dtype,
                            |[d]| cpu::max_pool2d_backward(d, a, &g),
                            |[d]| cpu::max_pool2d_backward(d, a, &g),
                        )
                        .into()),
                        Argmax::Cuda(_) => Err(moved()),
                    },
                    |[(s, l)]| match &argmax {
                        Argmax::Cuda(a) => Ok(cuda::pool::max_pool2d_backward(s, l, a, &g)?.into()),
                        Argmax::Cpu(_) => Err(moved()),
                    },
                )?;
                let dx = Tensor::from_storage(dx, &in_shape)?;
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
        let out = pool_kernel(
            "avg_pool2d",
            self,
            &out_shape,
            |x| cpu::avg_pool2d(x, &g),
            |x| cpu::avg_pool2d(x, &g),
            |s, l| cuda::pool::avg_pool2d(s, l, &g),
        )?;
        let in_shape = self.shape().to_vec();
        Ok(out.recorded(&[self], move || {
            backward_fn("avg_pool2d", move |dy, _| {
                let dx = pool_kernel(
                    "avg_pool2d",
                    dy,
                    &in_shape,
                    |d| cpu::avg_pool2d_backward(d, &g),
                    |d| cpu::avg_pool2d_backward(d, &g),
                    |s, l| cuda::pool::avg_pool2d_backward(s, l, &g),
                )?;
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
        let out = pool_kernel(
            "upsample_nearest2d",
            self,
            &out_shape,
            |x| cpu::upsample_nearest(x, planes, h, w, scale_h, scale_w),
            |x| cpu::upsample_nearest(x, planes, h, w, scale_h, scale_w),
            |st, l| cuda::pool::upsample_nearest(st, l, planes, plane, scale),
        )?;
        let in_shape = s.to_vec();
        Ok(out.recorded(&[self], move || {
            backward_fn("upsample_nearest2d", move |dy, _| {
                let dx = pool_kernel(
                    "upsample_nearest2d",
                    dy,
                    &in_shape,
                    |d| cpu::upsample_nearest_backward(d, planes, h, w, scale_h, scale_w),
                    |d| cpu::upsample_nearest_backward(d, planes, h, w, scale_h, scale_w),
                    |st, l| cuda::pool::upsample_nearest_backward(st, l, planes, plane, scale),
                )?;
                Ok(vec![Some(dx)])
            })
        }))
    }
}
