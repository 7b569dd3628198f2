//! ConvTranspose2d: weight [Cin, Cout/groups, kh, kw] and bias [Cout], as
//! torch.nn.ConvTranspose2d, over the engine's conv_transpose2d op.

use super::conv2d::{conv_parameters, lower_conv};
use super::module::{weight_and_bias, Module};
use crate::{ConvTranspose2dOptions, Error, Generator, Result, Tensor};

pub struct ConvTranspose2d {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    pub options: ConvTranspose2dOptions,
    training: bool,
}

impl ConvTranspose2d {
    /// PyTorch's default init: kaiming_uniform(a = sqrt(5)) for the weight and
    /// U(+-1/sqrt(fan_in)) for the bias, fan_in = Cout/groups * kh * kw (the weight's dim 1).
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: (usize, usize),
        options: ConvTranspose2dOptions,
        bias: bool,
        gen: &mut Generator,
    ) -> Result<Self> {
        let g = options.groups;
        if g == 0 || !in_channels.is_multiple_of(g) || !out_channels.is_multiple_of(g) {
            return Err(Error::invalid(
                "ConvTranspose2d",
                format!("groups {g} must divide in_channels {in_channels} and out_channels {out_channels}"),
            ));
        }
        let shape = [in_channels, out_channels / g, kernel_size.0, kernel_size.1];
        let (weight, bias) = conv_parameters(&shape, bias.then_some(out_channels), gen)?;
        Ok(ConvTranspose2d {
            weight,
            bias,
            options,
            training: true,
        })
    }
}

impl Module for ConvTranspose2d {
    /// x [N, Cin, H, W] -> [N, Cout, Ho, Wo].
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let cin = self.weight.shape()[0];
        if x.rank() != 4 || x.shape()[1] != cin {
            return Err(Error::layer_input(
                self.title(),
                format!("input [N, {cin}, H, W]"),
                format!("{:?}", x.shape()),
            ));
        }
        x.conv_transpose2d(&self.weight, self.bias.as_ref(), self.options)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        weight_and_bias(Some(&self.weight), self.bias.as_ref())
    }

    super::module::training_field!();

    fn title(&self) -> String {
        let w = self.weight.shape();
        let o = &self.options;
        let mut line = format!(
            "ConvTranspose2d({}, {}, kernel=({}, {}), stride={:?}, padding={:?}",
            w[0],
            w[1] * o.groups,
            w[2],
            w[3],
            o.stride,
            o.padding
        );
        if o.output_padding != (0, 0) {
            line += &format!(", output_padding={:?}", o.output_padding);
        }
        if o.dilation != (1, 1) {
            line += &format!(", dilation={:?}", o.dilation);
        }
        if o.groups != 1 {
            line += &format!(", groups={}", o.groups);
        }
        line + &format!(", bias={})", self.bias.is_some())
    }

    /// One ConvTranspose node with the layer's geometry.
    fn to_onnx(
        &self,
        g: &mut crate::io::onnx::export::GraphBuilder,
        prefix: &str,
        x: &str,
    ) -> Result<String> {
        use crate::io::onnx::export::Attr;
        let o = &self.options;
        let geometry = crate::Conv2dOptions {
            stride: o.stride,
            padding: o.padding,
            dilation: o.dilation,
            groups: o.groups,
        };
        let (oh, ow) = (o.output_padding.0 as i64, o.output_padding.1 as i64);
        let extra = [("output_padding", Attr::Ints(vec![oh, ow]))];
        let (w, b) = (&self.weight, self.bias.as_ref());
        lower_conv(g, "ConvTranspose", prefix, x, w, b, geometry, &extra)
    }
}
