//! ConvTranspose2d: weight [Cin, Cout/groups, kh, kw] and bias [Cout], as
//! torch.nn.ConvTranspose2d, over the engine's conv_transpose2d op.

use super::init::{fan_in_and_fan_out, kaiming_uniform_, uniform_, FanMode};
use super::module::{new_parameter, weight_and_bias, Module};
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
        let weight = new_parameter(&shape, |t| {
            kaiming_uniform_(t, 5f64.sqrt(), FanMode::FanIn, gen)
        })?;
        let (fan_in, _) = fan_in_and_fan_out(&shape)?;
        let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
        let bias = bias
            .then(|| new_parameter(&[out_channels], |t| uniform_(t, -bound, bound, gen)))
            .transpose()?;
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
        g: &mut crate::io::onnx::export::OnnxGraph,
        prefix: &str,
        x: &str,
    ) -> Result<String> {
        use crate::io::onnx::export::Attr;
        let o = &self.options;
        let w = g.initializer(&format!("{prefix}weight"), &self.weight)?;
        let mut inputs = vec![x.to_string(), w];
        if let Some(b) = &self.bias {
            inputs.push(g.initializer(&format!("{prefix}bias"), b)?);
        }
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        let shape = self.weight.shape();
        let pair = |(a, b): (usize, usize)| vec![a as i64, b as i64];
        let (ph, pw) = (o.padding.0 as i64, o.padding.1 as i64);
        let attrs = [
            (
                "kernel_shape",
                Attr::Ints(vec![shape[2] as i64, shape[3] as i64]),
            ),
            ("strides", Attr::Ints(pair(o.stride))),
            ("pads", Attr::Ints(vec![ph, pw, ph, pw])),
            ("output_padding", Attr::Ints(pair(o.output_padding))),
            ("dilations", Attr::Ints(pair(o.dilation))),
            ("group", Attr::Int(o.groups as i64)),
        ];
        Ok(g.node("ConvTranspose", &inputs, &attrs))
    }
}
