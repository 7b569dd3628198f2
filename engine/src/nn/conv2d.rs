//! Conv2d: weight [O, C/groups, kh, kw] and bias [O], as torch.nn.Conv2d, over the engine's
//! conv2d op (stride, padding, dilation, groups).

use super::init::{fan_in_and_fan_out, kaiming_uniform_, uniform_, FanMode};
use super::module::{new_parameter, weight_and_bias, Module};
use crate::backend::spec::UnaryOp;
use crate::io::onnx::export::{Attr, GraphBuilder};
use crate::{Conv2dOptions, Error, Generator, Result, Tensor};

pub struct Conv2d {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    pub options: Conv2dOptions,
    training: bool,
}

impl Conv2d {
    /// PyTorch's default init: kaiming_uniform(a = sqrt(5)) for the weight and
    /// U(+-1/sqrt(fan_in)) for the bias, with fan_in = C/groups * kh * kw.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: (usize, usize),
        options: Conv2dOptions,
        bias: bool,
        gen: &mut Generator,
    ) -> Result<Self> {
        let g = options.groups;
        if g == 0 || !in_channels.is_multiple_of(g) || !out_channels.is_multiple_of(g) {
            return Err(Error::invalid(
                "Conv2d",
                format!("groups {g} must divide in_channels {in_channels} and out_channels {out_channels}"),
            ));
        }
        let shape = [out_channels, in_channels / g, kernel_size.0, kernel_size.1];
        let (weight, bias) = conv_parameters(&shape, bias.then_some(out_channels), gen)?;
        Ok(Conv2d {
            weight,
            bias,
            options,
            training: true,
        })
    }
}

/// PyTorch's init of a convolution's (or transposed convolution's) parameters: the weight of
/// `shape` kaiming_uniform(a = sqrt(5)), and a bias of `bias_len` from U(+-1/sqrt(fan_in)),
/// fan_in = the weight's dim 1 times its kernel.
pub(super) fn conv_parameters(
    shape: &[usize; 4],
    bias_len: Option<usize>,
    gen: &mut Generator,
) -> Result<(Tensor, Option<Tensor>)> {
    let weight = new_parameter(shape, |t| {
        kaiming_uniform_(t, 5f64.sqrt(), FanMode::FanIn, gen)
    })?;
    let (fan_in, _) = fan_in_and_fan_out(shape)?;
    let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
    let bias = bias_len
        .map(|n| new_parameter(&[n], |t| uniform_(t, -bound, bound, gen)))
        .transpose()?;
    Ok((weight, bias))
}

/// One ONNX `op` node (Conv or ConvTranspose) over `x` with the weight and bias as
/// initializers named under `prefix`, the kernel and `geometry`'s stride, symmetric padding,
/// dilation and groups as attributes, and `extra` attributes after them.
#[allow(clippy::too_many_arguments)]
pub(super) fn lower_conv(
    g: &mut GraphBuilder,
    op: &str,
    prefix: &str,
    x: &str,
    weight: &Tensor,
    bias: Option<&Tensor>,
    geometry: Conv2dOptions,
    extra: &[(&'static str, Attr)],
) -> Result<String> {
    let w = g.initializer(&format!("{prefix}weight"), weight)?;
    let mut inputs = vec![x.to_string(), w];
    if let Some(b) = bias {
        inputs.push(g.initializer(&format!("{prefix}bias"), b)?);
    }
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let shape = weight.shape();
    let Conv2dOptions {
        stride,
        padding,
        dilation,
        groups,
    } = geometry;
    let pair = |(a, b): (usize, usize)| vec![a as i64, b as i64];
    let (ph, pw) = (padding.0 as i64, padding.1 as i64);
    let mut attrs = vec![
        (
            "kernel_shape",
            Attr::Ints(vec![shape[2] as i64, shape[3] as i64]),
        ),
        ("strides", Attr::Ints(pair(stride))),
        ("pads", Attr::Ints(vec![ph, pw, ph, pw])),
        ("dilations", Attr::Ints(pair(dilation))),
        ("group", Attr::Int(groups as i64)),
    ];
    attrs.extend(extra.iter().cloned());
    Ok(g.node(op, &inputs, &attrs))
}

impl Conv2d {
    /// The convolution followed by `act`, with the bias and the activation in one pass.
    pub fn forward_act(&self, x: &Tensor, act: Option<UnaryOp>) -> Result<Tensor> {
        x.conv2d_act(&self.weight, self.bias.as_ref(), self.options, act)
    }
}

impl Module for Conv2d {
    /// x [N, C, H, W] -> [N, O, Ho, Wo].
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // Said from the layer's side; the op's own checks cover a weight of another rank.
        if let [out_channels, per_group, kh, kw] = *self.weight.shape() {
            let in_channels = per_group * self.options.groups;
            if x.rank() != 4 || x.shape()[1] != in_channels {
                return Err(Error::layer_input(
                    format!("Conv2d({in_channels}→{out_channels}, kernel {kh}×{kw})"),
                    format!("input [N, {in_channels}, H, W]"),
                    format!("{:?}", x.shape()),
                ));
            }
        }
        x.conv2d(&self.weight, self.bias.as_ref(), self.options)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        weight_and_bias(Some(&self.weight), self.bias.as_ref())
    }

    super::module::training_field!();

    fn title(&self) -> String {
        let w = self.weight.shape();
        let o = &self.options;
        let mut line = format!(
            "Conv2d({}, {}, kernel=({}, {}), stride={:?}, padding={:?}",
            w[1] * o.groups,
            w[0],
            w[2],
            w[3],
            o.stride,
            o.padding
        );
        if o.dilation != (1, 1) {
            line += &format!(", dilation={:?}", o.dilation);
        }
        if o.groups != 1 {
            line += &format!(", groups={}", o.groups);
        }
        line += &format!(", bias={})", self.bias.is_some());
        line
    }

    /// One Conv node with the layer's stride, padding, dilation and groups.
    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        let (w, b) = (&self.weight, self.bias.as_ref());
        lower_conv(g, "Conv", prefix, x, w, b, self.options, &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device};

    #[test]
    fn conv2d_rejects_an_input_with_other_channels_saying_what_it_expects() {
        let conv = Conv2d::new(
            3,
            16,
            (3, 3),
            Conv2dOptions::default(),
            false,
            &mut Generator::new(0),
        )
        .unwrap();
        let x = Tensor::zeros(&[1, 4, 8, 8], DType::F32, Device::Cpu).unwrap();
        let err = conv.forward(&x).err().unwrap().to_string();
        assert_eq!(
            err,
            "Conv2d(3→16, kernel 3×3) expects input [N, 3, H, W], got [1, 4, 8, 8]"
        );
    }

    #[test]
    fn conv2d_module_has_grouped_weight_shape_and_output_geometry() {
        let opts = Conv2dOptions {
            stride: (2, 2),
            padding: (1, 1),
            dilation: (1, 1),
            groups: 2,
        };
        let c = Conv2d::new(4, 6, (3, 3), opts, true, &mut Generator::new(0)).unwrap();
        assert_eq!(c.weight.shape(), [6, 2, 3, 3]);
        // fan_in 18: both tensors within 1/sqrt(18).
        for (_, t) in c.named_parameters() {
            let max = t
                .to_vec_f64()
                .unwrap()
                .iter()
                .fold(0f64, |m, x| m.max(x.abs()));
            assert!(max <= 1.0 / 18f64.sqrt());
        }
        let x = Tensor::ones(&[1, 4, 7, 7], DType::F32, Device::Cpu).unwrap();
        assert_eq!(c.forward(&x).unwrap().shape(), [1, 6, 4, 4]);
    }

    #[test]
    fn conv2d_module_with_one_by_one_kernel_is_a_per_pixel_linear_map() {
        let mut c = Conv2d::new(
            2,
            1,
            (1, 1),
            Conv2dOptions::default(),
            true,
            &mut Generator::new(0),
        )
        .unwrap();
        c.weight = Tensor::from_vec(vec![2f32, -1.], &[1, 2, 1, 1]).unwrap();
        c.bias = Some(Tensor::from_vec(vec![0.5f32], &[1]).unwrap());
        let x = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[1, 2, 1, 2]).unwrap();
        // Pixel 0: 2*1 - 3 + 0.5; pixel 1: 2*2 - 4 + 0.5.
        assert_eq!(c.forward(&x).unwrap().to_vec_f32().unwrap(), [-0.5, 0.5]);
    }
}
