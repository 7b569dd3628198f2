//! One decoder layer: pre-norm attention and a pre-norm gated MLP, each added to the residual
//! stream. Gemma 2 norms each half's output as well before it is added: its
//! `post_attention_layernorm` is that post-norm of attention, and two more norms go around the
//! MLP.

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
    /// Gemma 2's norms before and after the MLP (`post_attention_layernorm` then norms
    /// attention's output).
    pub feedforward_norms: Option<FeedforwardNorms>,
}

pub struct FeedforwardNorms {
    pub pre: RmsNorm,
    pub post: RmsNorm,
}

impl Block {
    /// Draws (or reads) the parameters in Hugging Face's order, so a seed gives the weights it
    /// always gave.
    pub fn build(
        c: &LmConfig,
        layer: usize,
        prefix: &str,
        params: &mut ParamSource,
    ) -> Result<Self> {
        let input_layernorm = params.rms_norm(&format!("{prefix}.input_layernorm"), c)?;
        let self_attn = Attention::build(c, layer, &format!("{prefix}.self_attn"), params)?;
        let post_attention_layernorm =
            params.rms_norm(&format!("{prefix}.post_attention_layernorm"), c)?;
        let mut proj = |name: &str, i, o| params.linear(&format!("{prefix}.mlp.{name}"), i, o);
        let (d, f) = (c.d_model, c.ffn_hidden);
        let [gate, up] = match c.family.fused_projections() {
            true => params.fused_linears(&format!("{prefix}.mlp.gate_up_proj"), d, [f, f])?,
            false => [proj("gate_proj", d, f)?, proj("up_proj", d, f)?],
        };
        let down = params.linear(&format!("{prefix}.mlp.down_proj"), f, d)?;
        let mlp = GatedMlp::new(gate, up, down).with_activation(c.gate_activation());
        let feedforward_norms = match c.post_norms() {
            true => Some(FeedforwardNorms {
                pre: params.rms_norm(&format!("{prefix}.pre_feedforward_layernorm"), c)?,
                post: params.rms_norm(&format!("{prefix}.post_feedforward_layernorm"), c)?,
            }),
            false => None,
        };
        Ok(Block {
            input_layernorm,
            self_attn,
            post_attention_layernorm,
            mlp,
            feedforward_norms,
        })
    }

    /// x + attention(norm(x)), then h + mlp(norm(h)). The stream stays in the parameters'
    /// dtype; under mixed precision each normed input is cast once for the products that
    /// share it.
    pub fn forward(&self, stream: Stream, step: &Step) -> Result<Stream> {
        let attn = &self.self_attn;
        match &self.feedforward_norms {
            None => {
                let h = attn.forward(stream, &self.input_layernorm, None, step)?;
                self.mlp
                    .forward_residual(h, &self.post_attention_layernorm, None)
            }
            Some(ff) => {
                let post = Some(&self.post_attention_layernorm);
                let h = attn.forward(stream, &self.input_layernorm, post, step)?;
                self.mlp.forward_residual(h, &ff.pre, Some(&ff.post))
            }
        }
    }

    /// The printed form, in Hugging Face's child names.
    pub fn summary(&self) -> Summary {
        let mut children = vec![
            ("input_layernorm".into(), self.input_layernorm.summary()),
            ("self_attn".into(), self.self_attn.summary()),
            (
                "post_attention_layernorm".into(),
                self.post_attention_layernorm.summary(),
            ),
            ("mlp".into(), self.mlp.summary()),
        ];
        if let Some(ff) = &self.feedforward_norms {
            children.push(("pre_feedforward_layernorm".into(), ff.pre.summary()));
            children.push(("post_feedforward_layernorm".into(), ff.post.summary()));
        }
        Summary::node("Block", children)
    }

    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = prefixed("input_layernorm", self.input_layernorm.named_parameters());
        out.extend(prefixed("self_attn", self.self_attn.named_parameters()));
        out.extend(prefixed(
            "post_attention_layernorm",
            self.post_attention_layernorm.named_parameters(),
        ));
        out.extend(prefixed("mlp", self.mlp.named_parameters()));
        if let Some(ff) = &self.feedforward_norms {
            out.extend(prefixed("pre_feedforward_layernorm", ff.pre.named_parameters()));
            out.extend(prefixed("post_feedforward_layernorm", ff.post.named_parameters()));
        }
        out
    }
}
