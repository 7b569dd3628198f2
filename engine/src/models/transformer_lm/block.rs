//! One decoder layer: pre-norm attention and a pre-norm gated MLP, each added to the residual
//! stream.

use super::attention::{Attention, Step};
use super::params::ParamSource;
use super::LmConfig;
use crate::nn::{prefixed, GatedMlp, Module, RmsNorm, Summary};
use crate::ops::pre_norm::Stream;
use crate::{Result, Tensor};

pub struct Block {
    pub input_layernorm: RmsNorm,
    pub self_attn: Attention,
    pub post_attention_layernorm: RmsNorm,
    pub mlp: GatedMlp,
}

impl Block {
    /// Draws (or reads) the parameters in Hugging Face's order, so a seed gives the weights it
    /// always gave.
    pub fn build(c: &LmConfig, prefix: &str, params: &mut ParamSource) -> Result<Self> {
        let input_layernorm = params.rms_norm(&format!("{prefix}.input_layernorm"), c)?;
        let self_attn = Attention::build(c, &format!("{prefix}.self_attn"), params)?;
        let post_attention_layernorm =
            params.rms_norm(&format!("{prefix}.post_attention_layernorm"), c)?;
        let mut proj = |name: &str, i, o| params.linear(&format!("{prefix}.mlp.{name}"), i, o);
        let mlp = GatedMlp::new(
            proj("gate_proj", c.d_model, c.ffn_hidden)?,
            proj("up_proj", c.d_model, c.ffn_hidden)?,
            proj("down_proj", c.ffn_hidden, c.d_model)?,
        )
        .with_activation(c.gate_activation());
        Ok(Block {
            input_layernorm,
            self_attn,
            post_attention_layernorm,
            mlp,
        })
    }

    /// x + attention(norm(x)), then h + mlp(norm(h)). The stream stays in the parameters'
    /// dtype; under mixed precision each normed input is cast once for the products that
    /// share it.
    pub fn forward(&self, stream: Stream, step: &Step) -> Result<Stream> {
        let h = self
            .self_attn
            .forward(stream, &self.input_layernorm, step)?;
        self.mlp.forward_residual(h, &self.post_attention_layernorm)
    }

    /// The printed form, in Hugging Face's child names.
    pub fn summary(&self) -> Summary {
        Summary::node(
            "Block",
            vec![
                ("input_layernorm".into(), self.input_layernorm.summary()),
                ("self_attn".into(), self.self_attn.summary()),
                (
                    "post_attention_layernorm".into(),
                    self.post_attention_layernorm.summary(),
                ),
                ("mlp".into(), self.mlp.summary()),
            ],
        )
    }

    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = prefixed("input_layernorm", self.input_layernorm.named_parameters());
        out.extend(prefixed("self_attn", self.self_attn.named_parameters()));
        out.extend(prefixed(
            "post_attention_layernorm",
            self.post_attention_layernorm.named_parameters(),
        ));
        out.extend(prefixed("mlp", self.mlp.named_parameters()));
        out
    }
}
