//! conv_transpose2d (torch.nn.functional.conv_transpose2d): the gradient of a conv2d with
//! respect to its input, run forward. It needs no kernel of its own: the forward is conv2d's
//! input-gradient product, and its backward is conv2d itself (for the input) and conv2d's
//! weight-gradient product (for the weight), each reached through ops/conv.rs.

use super::conv::{input_grad_product, weight_grad_product, with_bias_act};
use super::{backward_fn, grad_if};
use crate::amp::{matmul_operand_dtype, operand};
use crate::autograd::SavedTensor;
use crate::backend::spec::Conv2dGeometry;
use crate::{Conv2dOptions, Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose2dOptions {
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    /// Added to one side of the output, choosing among the sizes a strided conv2d maps to the
    /// same input size; less than the stride or the dilation.
    pub output_padding: (usize, usize),
    pub dilation: (usize, usize),
    pub groups: usize,
}

impl Default for ConvTranspose2dOptions {
    fn default() -> Self {
        ConvTranspose2dOptions {
            stride: (1, 1),
            padding: (0, 0),
            output_padding: (0, 0),
            dilation: (1, 1),
            groups: 1,
        }
    }
}

impl ConvTranspose2dOptions {
    /// The conv2d whose input gradient this is.
    fn conv(&self) -> Conv2dOptions {
        Conv2dOptions {
            stride: self.stride,
            padding: self.padding,
            dilation: self.dilation,
            groups: self.groups,
        }
    }
}

/// The conv2d geometry seen from its output: x [N, Cin, H, W] is that conv's output and the
/// result [N, Cout, Ho, Wo] its input, with weight [Cin, Cout/groups, kh, kw].
fn geometry(x: &[usize], w: &[usize], o: &ConvTranspose2dOptions) -> Result<Conv2dGeometry> {
    let bad = |msg: String| Err(Error::invalid("conv_transpose2d", msg));
    if x.len() != 4 || w.len() != 4 {
        return bad(format!(
            "needs input [N, Cin, H, W] and weight [Cin, Cout/groups, kh, kw], got {x:?} and {w:?}"
        ));
    }
    let positive = [
        o.stride.0,
        o.stride.1,
        o.dilation.0,
        o.dilation.1,
        o.groups,
        w[2],
        w[3],
    ];
    if positive.contains(&0) {
        return bad(format!(
            "stride, dilation, groups and the kernel must be positive, got {o:?} and kernel {:?}",
            &w[2..]
        ));
    }
    if x[1] != w[0] || !w[0].is_multiple_of(o.groups) {
        return Err(Error::ShapeMismatch {
            op: "conv_transpose2d",
            lhs: x.to_vec(),
            rhs: w.to_vec(),
        });
    }
    let (op, s, d) = (o.output_padding, o.stride, o.dilation);
    if op.0 >= s.0.max(d.0) || op.1 >= s.1.max(d.1) {
        return bad(format!(
            "output_padding {op:?} must be smaller than the stride {s:?} or the dilation {d:?}"
        ));
    }
    let side = |size: usize, stride: usize, pad: usize, k: usize, dil: usize, extra: usize| {
        ((size - 1) * stride + dil * (k - 1) + extra + 1).checked_sub(2 * pad)
    };
    let (Some(ho), Some(wo)) = (
        side(x[2], s.0, o.padding.0, w[2], d.0, op.0),
        side(x[3], s.1, o.padding.1, w[3], d.1, op.1),
    ) else {
        return bad(format!("padding {:?} leaves no output", o.padding));
    };
    if x[2] == 0 || x[3] == 0 || ho == 0 || wo == 0 {
        return bad(format!("an empty image: input {x:?}, output {ho}x{wo}"));
    }
    Ok(Conv2dGeometry {
        n: x[0],
        c: w[1] * o.groups,
        h: ho,
        w: wo,
        o: w[0],
        kh: w[2],
        kw: w[3],
        stride: s,
        padding: o.padding,
        dilation: d,
        groups: o.groups,
        ho: x[2],
        wo: x[3],
    })
}

impl Tensor {
    /// Transposed 2-D convolution of x [N, Cin, H, W] with weight [Cin, Cout/groups, kh, kw]
    /// (PyTorch's layout) plus an optional bias [Cout]: the output is
    /// [N, Cout, (H - 1) stride - 2 padding + dilation (kh - 1) + output_padding + 1, ...].
    pub fn conv_transpose2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: ConvTranspose2dOptions,
    ) -> Result<Tensor> {
        self.check_same_device("conv_transpose2d", weight)?;
        let g = geometry(self.shape(), weight.shape(), &opts)?;
        let dtype = self.dtype().promote(weight.dtype()).float_result();
        let dtype = matmul_operand_dtype(self.device(), dtype).unwrap_or(dtype);
        let (x, w) = (operand(self, dtype)?, operand(weight, dtype)?);
        let out_shape = [g.n, g.c, g.h, g.w];
        let out = input_grad_product(&x, &w, &g, dtype, &out_shape)?;
        let out = out.recorded(&[&x, &w], || {
            let (sx, sw) = (
                SavedTensor::new("conv_transpose2d", &x),
                SavedTensor::new("conv_transpose2d", &w),
            );
            let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
            let conv = opts.conv();
            backward_fn("conv_transpose2d", move |dy, needs| {
                let (x, w) = (sx.get()?, sw.get()?);
                let dy = dy.to_dtype(dtype)?;
                let input_grad = || -> Result<Tensor> {
                    let gx = dy.conv2d(w, None, conv)?;
                    debug_assert_eq!(gx.shape(), xs.as_slice());
                    Ok(gx)
                };
                Ok(vec![
                    grad_if(needs[0], input_grad)?,
                    grad_if(needs[1], || weight_grad_product(&dy, x, &g, dtype, &ws))?,
                ])
            })
        });
        with_bias_act(out, bias, None, g.c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stride_two_transpose_spreads_each_pixel_over_its_kernel() {
        // One input pixel of 1 and one of 2, kernel of ones 2x2, stride 2: each becomes a
        // 2x2 block of its value.
        let x = Tensor::from_vec(vec![1f32, 2.0], &[1, 1, 1, 2]).unwrap();
        let w = Tensor::from_vec(vec![1f32; 4], &[1, 1, 2, 2]).unwrap();
        let opts = ConvTranspose2dOptions {
            stride: (2, 2),
            ..Default::default()
        };
        let y = x.conv_transpose2d(&w, None, opts).unwrap();
        assert_eq!(y.shape(), &[1, 1, 2, 4]);
        assert_eq!(y.to_vec_f32().unwrap(), [1., 1., 2., 2., 1., 1., 2., 2.]);
    }

    #[test]
    fn output_padding_grows_one_side() {
        let x = Tensor::zeros(&[1, 2, 3, 3], crate::DType::F32, crate::Device::Cpu).unwrap();
        let w = Tensor::zeros(&[2, 4, 3, 3], crate::DType::F32, crate::Device::Cpu).unwrap();
        let opts = ConvTranspose2dOptions {
            stride: (2, 2),
            padding: (1, 1),
            output_padding: (1, 0),
            ..Default::default()
        };
        let y = x.conv_transpose2d(&w, None, opts).unwrap();
        assert_eq!(y.shape(), &[1, 4, 6, 5]);
        let too_much = ConvTranspose2dOptions {
            output_padding: (2, 0),
            ..opts
        };
        let err = x
            .conv_transpose2d(&w, None, too_much)
            .unwrap_err()
            .to_string();
        assert!(err.contains("must be smaller than the stride"), "{err}");
    }
}
