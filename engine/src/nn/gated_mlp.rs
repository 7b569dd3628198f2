//! The gated feed-forward of LLaMA-style decoders (Hugging Face's `mlp`):
//! down(act(gate(x)) * up(x)), act SiLU (SwiGLU) or, for Gemma, tanh-approximated GELU
//! (GeGLU). As a pre-norm layer's second half (`forward_residual`) it takes the residual stream
//! and its norm, and the ops below choose the fused kernels (`ops::pre_norm`).

use super::module::Module;
use super::{Activation, Linear, RmsNorm};
use crate::io::onnx::export::GraphBuilder;
use crate::ops::pre_norm::{Gate, Stream};
use crate::{Result, Tensor};

pub struct GatedMlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
    /// What the gate goes through (SiLU unless set).
    pub activation: Activation,
    training: bool,
}

impl GatedMlp {
    pub fn new(gate_proj: Linear, up_proj: Linear, down_proj: Linear) -> Self {
        GatedMlp {
            gate_proj,
            up_proj,
            down_proj,
            activation: Activation::Silu,
            training: true,
        }
    }

    pub fn with_activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    /// The stream after this half of a layer: x + down(act(gate(n)) * up(n)), n = norm(x);
    /// with `post`, that output is normed by it before it is added (Gemma 2).
    pub fn forward_residual(
        &self,
        stream: Stream,
        norm: &RmsNorm,
        post: Option<&RmsNorm>,
    ) -> Result<Stream> {
        let (gate, up) = (self.gate_proj.projection(), self.up_proj.projection());
        let (scale, eps) = norm.parts()?;
        let act = |g: &Tensor| self.activation.apply(g);
        let kind = match self.activation {
            Activation::Silu => Gate::Silu,
            _ => Gate::Other(&act),
        };
        let (x, gated) = stream.gated((&scale, eps), gate, up, kind)?;
        let post = post.map(RmsNorm::parts).transpose()?;
        let post = post.as_ref().map(|(s, e)| (s, *e));
        Stream::after(x, &gated, self.down_proj.projection(), post)
    }

    /// The three projections under their Hugging Face names.
    pub fn projections(&self) -> [(&'static str, &Linear); 3] {
        [
            ("gate_proj", &self.gate_proj),
            ("up_proj", &self.up_proj),
            ("down_proj", &self.down_proj),
        ]
    }

    pub fn projections_mut(&mut self) -> [(&'static str, &mut Linear); 3] {
        [
            ("gate_proj", &mut self.gate_proj),
            ("up_proj", &mut self.up_proj),
            ("down_proj", &mut self.down_proj),
        ]
    }
}

impl Module for GatedMlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (gate, up) = (self.gate_proj.forward(x)?, self.up_proj.forward(x)?);
        let gated = match self.activation {
            Activation::Silu => gate.swiglu(&up)?,
            act => act.apply(&gate)?.mul(&up)?,
        };
        self.down_proj.forward(&gated)
    }

    /// The three projections under their Hugging Face names.
    fn children(&self) -> Vec<(String, &dyn Module)> {
        self.projections()
            .into_iter()
            .map(|(n, l)| (n.to_string(), l as &dyn Module))
            .collect()
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        self.projections_mut()
            .into_iter()
            .map(|(_, l)| l as &mut dyn Module)
            .collect()
    }

    super::module::training_field!();

    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        let gate = self
            .gate_proj
            .to_onnx(g, &format!("{prefix}gate_proj."), x)?;
        let up = self.up_proj.to_onnx(g, &format!("{prefix}up_proj."), x)?;
        let act = self.activation.to_onnx(g, &gate)?;
        let gated = g.node("Mul", &[&act, &up], &[]);
        self.down_proj
            .to_onnx(g, &format!("{prefix}down_proj."), &gated)
    }
}
