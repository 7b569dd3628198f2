//! conv2d (stride, padding, dilation, groups) through im2col + gemm, with both backward products:
//! shape rules here, one kernel per backend (backend/{cpu,cuda}/conv.rs).

use super::dispatch::{cuda_kernel, dispatch};
use super::{backward_fn, grad_if};
use crate::amp::{channels_last_weight, matmul_operand_dtype, operand};
use crate::autograd::{is_grad_enabled, no_grad, SavedTensor};
use crate::backend::cpu::conv as cpu;
use crate::backend::cpu::floats::on_floats;
use crate::backend::cuda::conv as cuda;
use crate::backend::spec::{Conv2dGeometry, UnaryOp};
use crate::backend::Storage;
use crate::{DType, Device, Error, Layout, Result, Tensor};

/// Seconds spent so far choosing convolution algorithms (cuDNN's search for each new shape),
/// which a timed loop leaves out of its figures; 0 where nothing was searched.
pub fn algorithm_search_seconds() -> f64 {
    crate::backend::cuda::cudnn::search_seconds()
}

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

impl Tensor {
    /// 2-D convolution of [N, C, H, W] with [O, C/groups, kh, kw], plus an optional bias [O].
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: Conv2dOptions,
    ) -> Result<Tensor> {
        self.conv2d_act(weight, bias, opts, None)
    }

    /// `conv2d` followed by an activation: the bias and the activation run as one `bias_act`
    /// pass over the output. Under autocast on CUDA the product runs in the low dtype, as
    /// matrix products do, and so do the bias and the activation.
    pub fn conv2d_act(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: Conv2dOptions,
        act: Option<UnaryOp>,
    ) -> Result<Tensor> {
        self.check_same_device("conv2d", weight)?;
        let g = geometry(self.shape(), weight.shape(), &opts)?;
        let dtype = self.dtype().promote(weight.dtype()).float_result();
        let dtype = matmul_operand_dtype(self.device(), dtype).unwrap_or(dtype);
        if tiles_without_overlap(&g) {
            return patch_product(self, weight, bias, act, &g, dtype);
        }
        let recording = is_grad_enabled()
            && (self.requires_grad()
                || weight.requires_grad()
                || bias.is_some_and(|b| b.requires_grad()));
        if !recording
            && matches!(self.device(), Device::Cuda(_))
            && matches!(dtype, DType::F16 | DType::BF16)
            && cuda::channels_last_preferred()
        {
            let out = conv2d_channels_last(self, weight, &g, dtype)?;
            return with_bias_act(out, bias, act, g.o);
        }
        let (x, w) = (operand(self, dtype)?, operand(weight, dtype)?);
        let out_shape = [g.n, g.o, g.ho, g.wo];
        let out = dispatch(
            "conv2d",
            [&x, &w],
            |views| {
                let (f32k, f64k) = (
                    |[a, b]: [&[f32]; 2]| cpu::conv2d(a, b, &g),
                    |[a, b]: [&[f64]; 2]| cpu::conv2d(a, b, &g),
                );
                Ok(on_floats(views, dtype, f32k, f64k).into())
            },
            |[(xs, lx), (ws, lw)]| Ok(cuda::conv2d(xs, lx, ws, lw, &g)?.into()),
        )?;
        let out = Tensor::from_storage(out, &out_shape)?.recorded(&[&x, &w], || {
            let (sx, sw) = (
                SavedTensor::new("conv2d", &x),
                SavedTensor::new("conv2d", &w),
            );
            let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
            backward_fn("conv2d", move |dy, needs| {
                let (x, w) = (sx.get()?, sw.get()?);
                let dy = dy.to_dtype(dtype)?;
                Ok(vec![
                    grad_if(needs[0], || input_grad_product(&dy, w, &g, dtype, &xs))?,
                    grad_if(needs[1], || weight_grad_product(x, &dy, &g, dtype, &ws))?,
                ])
            })
        });
        with_bias_act(out, bias, act, g.o)
    }
}

/// The product conv2d's input gradient is: `dy` [N, O, Ho, Wo] through the weight `w` back to
/// an image of `shape` [N, C, H, W] (conv_transpose2d's forward too).
pub(super) fn input_grad_product(
    dy: &Tensor,
    w: &Tensor,
    g: &Conv2dGeometry,
    dtype: DType,
    shape: &[usize],
) -> Result<Tensor> {
    let storage = dispatch(
        "conv2d",
        [dy, w],
        |views| {
            let f32k = |[d, k]: [&[f32]; 2]| cpu::conv2d_input_grad(d, k, g);
            let f64k = |[d, k]: [&[f64]; 2]| cpu::conv2d_input_grad(d, k, g);
            Ok(on_floats(views, dtype, f32k, f64k).into())
        },
        |[(ds, ld), (ws, lw)]| Ok(cuda::conv2d_input_grad(ds, ld, ws, lw, g)?.into()),
    )?;
    Tensor::from_storage(storage, shape)
}

/// The product conv2d's weight gradient is: image `x` [N, C, H, W] with `dy` [N, O, Ho, Wo]
/// into a weight of `shape` [O, C/groups, kh, kw].
pub(super) fn weight_grad_product(
    x: &Tensor,
    dy: &Tensor,
    g: &Conv2dGeometry,
    dtype: DType,
    shape: &[usize],
) -> Result<Tensor> {
    let storage = dispatch(
        "conv2d",
        [x, dy],
        |views| {
            let f32k = |[a, d]: [&[f32]; 2]| cpu::conv2d_weight_grad(a, d, g);
            let f64k = |[a, d]: [&[f64]; 2]| cpu::conv2d_weight_grad(a, d, g);
            Ok(on_floats(views, dtype, f32k, f64k).into())
        },
        |[(xs, lx), (ds, ld)]| Ok(cuda::conv2d_weight_grad(xs, lx, ds, ld, g)?.into()),
    )?;
    Tensor::from_storage(storage, shape)
}

/// A convolution's output with its bias [O] and activation applied in one pass.
/// Windows that tile the input with no overlap, gap or padding (stride = kernel, one group):
/// a vision transformer's patch embedding.
fn tiles_without_overlap(g: &Conv2dGeometry) -> bool {
    g.stride == (g.kh, g.kw)
        && g.padding == (0, 0)
        && g.dilation == (1, 1)
        && g.groups == 1
        && g.kh * g.kw > 1
}

/// A convolution whose windows tile the input is one matrix product of the patches [N·ho·wo,
/// C·kh·kw] (one rearranging copy of the input) with the flattened weight; the result is
/// [N, O, ho, wo] over channels-last memory, so the tokens a patch embedding wants,
/// `permute([0, 2, 3, 1])`, are a view. cuDNN runs these as a general implicit GEMM that took
/// 2.4 ms for ViT-B/16's at batch 256 (BF16, H100), where the product needs about 0.1 ms.
/// Rows and columns the windows do not reach (H, W not multiples of the kernel) are left out.
fn patch_product(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    act: Option<UnaryOp>,
    g: &Conv2dGeometry,
    dtype: DType,
) -> Result<Tensor> {
    let (n, c, ho, wo, o) = (g.n, g.c, g.ho, g.wo, g.o);
    let (kh, kw) = (g.kh, g.kw);
    let mut x = operand(x, dtype)?;
    if g.h != ho * kh {
        x = x.narrow(2, 0, ho * kh)?;
    }
    if g.w != wo * kw {
        x = x.narrow(3, 0, wo * kw)?;
    }
    let patches = x
        .reshape_to(&[n, c, ho, kh, wo, kw])?
        .permute(&[0, 2, 4, 1, 3, 5])?
        .reshape_to(&[n * ho * wo, c * kh * kw])?;
    let w = operand(w, dtype)?.reshape_to(&[o, c * kh * kw])?;
    let y = with_bias_act(patches.matmul(&w.t()?)?, bias, act, o)?;
    y.reshape_to(&[n, ho, wo, o])?.permute(&[0, 3, 1, 2])
}

pub(super) fn with_bias_act(
    out: Tensor,
    bias: Option<&Tensor>,
    act: Option<UnaryOp>,
    o: usize,
) -> Result<Tensor> {
    match (bias, act) {
        (None, None) => Ok(out),
        (None, Some(op)) => out.unary(op),
        (Some(b), act) => {
            if b.shape() != [o] {
                return Err(Error::ShapeMismatch {
                    op: "conv2d bias",
                    lhs: vec![o],
                    rhs: b.shape().to_vec(),
                });
            }
            out.bias_act(b, act)
        }
    }
}

/// Inference in a half type on CUDA runs channels-last, the layout of cuDNN's tensor-core
/// kernels: the images are transposed to NHWC unless they already are (the previous layer's
/// output is), the weights to [O, kh, kw, C/groups], and the result stays NHWC, so a network of
/// convolutions transposes only its input. Training keeps the NCHW path and its backward.
fn conv2d_channels_last(
    x: &Tensor,
    w: &Tensor,
    g: &Conv2dGeometry,
    dtype: DType,
) -> Result<Tensor> {
    no_grad(|| {
        let x = x.to_dtype(dtype)?;
        let x = if x.layout().is_channels_last() {
            x
        } else {
            x.permute(&[0, 2, 3, 1])?
                .contiguous()?
                .permute(&[0, 3, 1, 2])?
        };
        let w = channels_last_weight(w, dtype)?;
        let y = cuda_kernel("conv2d", [&x, &w], |[(xs, lx), (ws, lw)]| {
            cuda::conv2d_channels_last(xs, lx, ws, lw, g)
        })?;
        Tensor::from_storage_in(
            Storage::Cuda(y),
            Layout::channels_last(&[g.n, g.o, g.ho, g.wo]),
        )
    })
}
