//! conv2d (stride, padding, dilation, groups) through im2col + gemm, with both backward products.
//! The CPU runs its own kernels on host copies; on CUDA the op stays on the device: im2col
//! columns, one cuBLAS product batched over groups, and col2im for the input gradient.

use super::pool::cuda_kernel;
use super::{backward_fn, grad_if};
use crate::autograd::{no_grad, SavedTensor};
use crate::backend::cpu::conv::{self as cpu, Conv2dGeometry};
use crate::backend::cuda;
use crate::{DType, Device, Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dOptions {
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub dilation: (usize, usize),
    pub groups: usize,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions {
            stride: (1, 1),
            padding: (0, 0),
            dilation: (1, 1),
            groups: 1,
        }
    }
}

fn geometry(x: &[usize], w: &[usize], o: &Conv2dOptions) -> Result<Conv2dGeometry> {
    let bad = |msg: String| Err(Error::invalid("conv2d", msg));
    if x.len() != 4 || w.len() != 4 {
        return bad(format!(
            "needs input [N, C, H, W] and weight [O, C/groups, kh, kw], got {x:?} and {w:?}"
        ));
    }
    if o.groups == 0 || o.stride.0 == 0 || o.stride.1 == 0 || o.dilation.0 == 0 || o.dilation.1 == 0
    {
        return bad(format!(
            "stride, dilation and groups must be positive, got {o:?}"
        ));
    }
    if w[2] == 0 || w[3] == 0 {
        return bad(format!("kernel size must be positive, got {:?}", &w[2..]));
    }
    let (c, oc) = (x[1], w[0]);
    if c % o.groups != 0 || oc % o.groups != 0 || w[1] * o.groups != c {
        return Err(Error::ShapeMismatch {
            op: "conv2d",
            lhs: x.to_vec(),
            rhs: w.to_vec(),
        });
    }
    let span = |size: usize, pad: usize, k: usize, dil: usize, stride: usize| -> Option<usize> {
        let eff = dil * (k - 1) + 1;
        (size + 2 * pad).checked_sub(eff).map(|r| r / stride + 1)
    };
    let (Some(ho), Some(wo)) = (
        span(x[2], o.padding.0, w[2], o.dilation.0, o.stride.0),
        span(x[3], o.padding.1, w[3], o.dilation.1, o.stride.1),
    ) else {
        return bad(format!(
            "kernel {:?} (dilation {:?}) is larger than the padded input {:?}",
            &w[2..],
            o.dilation,
            &x[2..]
        ));
    };
    Ok(Conv2dGeometry {
        n: x[0],
        c,
        h: x[2],
        w: x[3],
        o: oc,
        kh: w[2],
        kw: w[3],
        stride: o.stride,
        padding: o.padding,
        dilation: o.dilation,
        groups: o.groups,
        ho,
        wo,
    })
}

/// Runs `f` on contiguous f32 (or f64) copies of the operands and returns a tensor of `dtype`.
fn float_kernel(
    dtype: DType,
    shape: &[usize],
    a: &Tensor,
    b: &Tensor,
    f32k: impl FnOnce(&[f32], &[f32]) -> Vec<f32>,
    f64k: impl FnOnce(&[f64], &[f64]) -> Vec<f64>,
) -> Result<Tensor> {
    if dtype == DType::F64 {
        Tensor::from_vec(f64k(&a.to_vec::<f64>()?, &b.to_vec::<f64>()?), shape)
    } else {
        Tensor::from_vec(f32k(&a.to_vec::<f32>()?, &b.to_vec::<f32>()?), shape)?.to_dtype(dtype)
    }
}

/// Columns are built for at most this many elements at a time (512 MiB of F32); a larger
/// batch runs in chunks of whole images.
const COLS_BUDGET: usize = 1 << 27;

/// (start, count) of each chunk of images.
fn image_chunks(g: &Conv2dGeometry) -> Vec<(usize, usize)> {
    let per_image = (g.c * g.kh * g.kw * g.ho * g.wo).max(1);
    let step = (COLS_BUDGET / per_image).clamp(1, g.n.max(1));
    (0..g.n)
        .step_by(step)
        .map(|s| (s, step.min(g.n - s)))
        .collect()
}

/// (groups, out channels per group, column rows per group, output pixels per image).
fn group_dims(g: &Conv2dGeometry) -> (usize, usize, usize, usize) {
    let kr = g.c / g.groups * g.kh * g.kw;
    (g.groups, g.o / g.groups, kr, g.ho * g.wo)
}

/// Columns [groups, Cg*kh*kw, images*Ho*Wo] of the CUDA images x [images, C, H, W].
fn im2col(x: &Tensor, g: &Conv2dGeometry) -> Result<Tensor> {
    let images = x.shape()[0];
    let (groups, _, kr, p) = group_dims(g);
    cuda_kernel("conv2d", x, &[groups, kr, images * p], |s, l| {
        cuda::conv::im2col(s, l, g, images)
    })
}

/// Images [images, C, H, W] summed back from columns [groups, Cg*kh*kw, images*Ho*Wo].
fn col2im(cols: &Tensor, g: &Conv2dGeometry, images: usize) -> Result<Tensor> {
    cuda_kernel("conv2d", cols, &[images, g.c, g.h, g.w], |s, l| {
        cuda::conv::col2im(s, l, g, images)
    })
}

/// Images n0..n0+nc of dy [N, O, Ho, Wo] as [groups, O/groups, nc*Ho*Wo], the layout that
/// lines up with the columns.
fn grouped_grad(dy: &Tensor, g: &Conv2dGeometry, n0: usize, nc: usize) -> Result<Tensor> {
    let (groups, og, _, p) = group_dims(g);
    dy.narrow(0, n0, nc)?
        .reshape_to(&[nc, g.o, p])?
        .permute(&[1, 0, 2])?
        .contiguous()?
        .reshape_to(&[groups, og, nc * p])
}

/// The chunks' results joined along the batch dim, as a tensor of `shape`.
fn join(mut parts: Vec<Tensor>, shape: &[usize], like: &Tensor) -> Result<Tensor> {
    let whole = match parts.len() {
        0 => return Tensor::zeros(shape, like.dtype(), like.device()),
        1 => parts.remove(0),
        _ => Tensor::cat(&parts, 0)?,
    };
    whole.reshape_to(shape)
}

/// The forward on CUDA: per chunk, weight [groups, og, kr] times columns [groups, kr, nc*P]
/// gives [O, nc, P], transposed to [nc, O, P].
fn conv2d_cuda(x: &Tensor, w: &Tensor, g: &Conv2dGeometry) -> Result<Tensor> {
    let (groups, og, kr, p) = group_dims(g);
    let wg = w.reshape_to(&[groups, og, kr])?;
    let parts = image_chunks(g)
        .into_iter()
        .map(|(n0, nc)| {
            let cols = im2col(&x.narrow(0, n0, nc)?, g)?;
            wg.matmul(&cols)?
                .reshape_to(&[g.o, nc, p])?
                .permute(&[1, 0, 2])?
                .contiguous()
        })
        .collect::<Result<Vec<_>>>()?;
    join(parts, &[g.n, g.o, g.ho, g.wo], x)
}

/// dL/dx on CUDA: weight^T [groups, kr, og] times the grouped gradient gives column
/// gradients, which col2im sums back into pixels.
fn conv2d_cuda_input_grad(dy: &Tensor, w: &Tensor, g: &Conv2dGeometry) -> Result<Tensor> {
    let (groups, og, kr, _) = group_dims(g);
    let wt = w.reshape_to(&[groups, og, kr])?.transpose(1, 2)?;
    let parts = image_chunks(g)
        .into_iter()
        .map(|(n0, nc)| col2im(&wt.matmul(&grouped_grad(dy, g, n0, nc)?)?, g, nc))
        .collect::<Result<Vec<_>>>()?;
    join(parts, &[g.n, g.c, g.h, g.w], dy)
}

/// dL/dw on CUDA: the grouped gradient times columns^T, summed over chunks (in F32 for the
/// half types, so a large batch does not round at each chunk).
fn conv2d_cuda_weight_grad(
    x: &Tensor,
    dy: &Tensor,
    g: &Conv2dGeometry,
    w_shape: &[usize],
) -> Result<Tensor> {
    let chunks = image_chunks(g);
    let dtype = dy.dtype();
    let sum_dtype = if chunks.len() > 1 && dtype != DType::F64 {
        DType::F32
    } else {
        dtype
    };
    let mut total: Option<Tensor> = None;
    for (n0, nc) in chunks {
        let cols = im2col(&x.narrow(0, n0, nc)?, g)?;
        let part = grouped_grad(dy, g, n0, nc)?
            .matmul(&cols.transpose(1, 2)?)?
            .to_dtype(sum_dtype)?;
        total = Some(match total {
            None => part,
            Some(t) => t.add(&part)?,
        });
    }
    match total {
        Some(t) => t.to_dtype(dtype)?.reshape_to(w_shape),
        None => Tensor::zeros(w_shape, dtype, dy.device()),
    }
}

impl Tensor {
    /// 2-D convolution of [N, C, H, W] with [O, C/groups, kh, kw], plus an optional bias [O].
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: Conv2dOptions,
    ) -> Result<Tensor> {
        self.check_same_device("conv2d", weight)?;
        let g = geometry(self.shape(), weight.shape(), &opts)?;
        let dtype = self.dtype().promote(weight.dtype()).float_result();
        let (x, w) = (self.to_dtype(dtype)?, weight.to_dtype(dtype)?);
        let out_shape = [g.n, g.o, g.ho, g.wo];
        let out = match x.device() {
            Device::Cpu => float_kernel(
                dtype,
                &out_shape,
                &x,
                &w,
                |a, b| cpu::conv2d(a, b, &g),
                |a, b| cpu::conv2d(a, b, &g),
            )?,
            Device::Cuda(_) => no_grad(|| conv2d_cuda(&x, &w, &g))?,
        };
        let out = out.recorded(&[&x, &w], || {
            let (sx, sw) = (
                SavedTensor::new("conv2d", &x),
                SavedTensor::new("conv2d", &w),
            );
            let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
            backward_fn("conv2d", move |dy, needs| {
                let (x, w) = (sx.get()?, sw.get()?);
                Ok(vec![
                    grad_if(needs[0], || match dy.device() {
                        Device::Cpu => float_kernel(
                            dtype,
                            &xs,
                            dy,
                            w,
                            |d, k| cpu::conv2d_input_grad(d, k, &g),
                            |d, k| cpu::conv2d_input_grad(d, k, &g),
                        ),
                        Device::Cuda(_) => {
                            no_grad(|| conv2d_cuda_input_grad(&dy.to_dtype(dtype)?, w, &g))
                        }
                    })?,
                    grad_if(needs[1], || match dy.device() {
                        Device::Cpu => float_kernel(
                            dtype,
                            &ws,
                            x,
                            dy,
                            |a, d| cpu::conv2d_weight_grad(a, d, &g),
                            |a, d| cpu::conv2d_weight_grad(a, d, &g),
                        ),
                        Device::Cuda(_) => {
                            no_grad(|| conv2d_cuda_weight_grad(x, &dy.to_dtype(dtype)?, &g, &ws))
                        }
                    })?,
                ])
            })
        });
        match bias {
            None => Ok(out),
            Some(b) => {
                if b.shape() != [g.o] {
                    return Err(Error::ShapeMismatch {
                        op: "conv2d bias",
                        lhs: vec![g.o],
                        rhs: b.shape().to_vec(),
                    });
                }
                out.add(&b.reshape_to(&[1, g.o, 1, 1])?)
            }
        }
    }
}
