//! LLaMA's SwiGLU feed-forward (`mlp`): down(silu(gate(x)) * up(x)). A mixture of experts
//! will be a second kind of feed-forward behind the same `forward`.

use super::params::ParamSource;
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

    /// x + forward(norm(x)), the normed input cast once for the products. With plain dense
    /// weights this is two fused products (norm with gate and up, gated in their epilogue;
    /// down with the residual); otherwise each projection's own forward.
    pub fn forward_residual(&self, x: &Tensor, norm: &RmsNorm) -> Result<Tensor> {
        let plain = [&self.gate_proj, &self.up_proj, &self.down_proj].map(Linear::plain_weight);
        if let [Some(gate), Some(up), Some(down)] = plain {
            let gated = x.rms_norm_swiglu(&norm.weight, norm.eps, gate, up)?;
            return gated.linear_residual(down, Some(x));
        }
        x.add(&self.forward(&norm.forward_for_products(x)?)?)
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
