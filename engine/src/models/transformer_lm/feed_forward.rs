//! LLaMA's SwiGLU feed-forward (`mlp`): down(silu(gate(x)) * up(x)). A mixture of experts
//! will be a second kind of feed-forward behind the same `forward`.

use super::params::ParamSource;
use super::residual::Residual;
use super::LmConfig;
use crate::nn::{prefixed, Linear, Module, RmsNorm, Summary};
use crate::{Result, Tensor};

pub struct SwiGlu {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

impl SwiGlu {
    pub fn build(c: &LmConfig, prefix: &str, params: &mut ParamSource) -> Result<Self> {
        let mut proj = |name: &str, i, o| params.linear(&format!("{prefix}.{name}"), i, o);
        Ok(SwiGlu {
            gate_proj: proj("gate_proj", c.d_model, c.ffn_hidden)?,
            up_proj: proj("up_proj", c.d_model, c.ffn_hidden)?,
            down_proj: proj("down_proj", c.ffn_hidden, c.d_model)?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gated = self
            .gate_proj
            .forward(x)?
            .swiglu(&self.up_proj.forward(x)?)?;
        self.down_proj.forward(&gated)
    }

    /// The stream after the feed-forward: x + forward(norm(x)), the normed input cast once
    /// for the products. With plain weights (dense or quantized) and nothing pending, the
    /// norm, gate and up are one fused op (gated in their epilogue in a decode step); a pending
    /// output is added by the norm (`Residual`), and the down product leaves its own pending or
    /// adds it.
    pub fn forward_residual(&self, stream: Residual, norm: &RmsNorm) -> Result<Residual> {
        let products = [&self.gate_proj, &self.up_proj].map(Linear::product_weight);
        let gate_up = products.map(|w| w.and_then(|w| w.dense()));
        let (x, gated) = match products {
            [Some(gate), Some(up)] if !stream.is_pending() => {
                let x = stream.into_sum();
                let gated = x.rms_norm_swiglu(&norm.weight, norm.eps, gate, up)?;
                (x, gated)
            }
            _ => {
                let (x, normed) = stream.normed_for_products(norm)?;
                let gated = match gate_up {
                    [Some(gate), Some(up)] => {
                        let gu = normed.linears(&[gate, up])?;
                        gu[0].swiglu(&gu[1])?
                    }
                    _ => self
                        .gate_proj
                        .forward(&normed)?
                        .swiglu(&self.up_proj.forward(&normed)?)?,
                };
                (x, gated)
            }
        };
        Residual::after(x, &gated, &self.down_proj)
    }

    /// The printed form: the three projections.
    pub fn summary(&self) -> Summary {
        let children = self
            .projections()
            .into_iter()
            .map(|(n, l)| (n.to_string(), l.summary()))
            .collect();
        Summary::node("SwiGlu", children)
    }

    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.projections()
            .into_iter()
            .flat_map(|(n, l)| prefixed(n, l.named_parameters()))
            .collect()
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
