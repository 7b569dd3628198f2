//! One decoder layer: pre-norm attention and pre-norm feed-forward, each added to the residual.

use super::attention::{Attention, Step};
use super::feed_forward::SwiGlu;
use super::params::ParamSource;
use super::residual::Residual;
use super::rope::Rotary;
use super::LmConfig;
use crate::nn::{prefixed, Module, RmsNorm, Summary};
use crate::{Result, Tensor};

pub struct Block {
    pub input_layernorm: RmsNorm,
    pub self_attn: Attention,
    pub post_attention_layernorm: RmsNorm,
    pub mlp: SwiGlu,
}

impl Block {
    pub fn build(c: &LmConfig, prefix: &str, params: &mut ParamSource) -> Result<Self> {
        Ok(Block {
            input_layernorm: params.rms_norm(&format!("{prefix}.input_layernorm"), c)?,
            self_attn: Attention::build(c, &format!("{prefix}.self_attn"), params)?,
            post_attention_layernorm: params
                .rms_norm(&format!("{prefix}.post_attention_layernorm"), c)?,
            mlp: SwiGlu::build(c, &format!("{prefix}.mlp"), params)?,
        })
    }

    /// The residual stream stays in the parameters' dtype; under mixed precision each normed
    /// input is cast once for the products that share it. Each half (attention, feed-forward)
    /// takes its norm and adds its residual itself (`Residual`): with plain dense weights in a
    /// decode step the norm, the products and the residual fuse (`rms_norm_linears`,
    /// `linear_residual`, `rms_norm_swiglu`), one kernel each; elsewhere each half's output is
    /// added by the next norm.
    pub fn forward(&self, stream: Residual, rope: &Rotary, step: &Step) -> Result<Residual> {
        let h = self
            .self_attn
            .forward_residual(stream, &self.input_layernorm, rope, step)?;
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
