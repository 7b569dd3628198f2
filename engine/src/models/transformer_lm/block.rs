//! One decoder layer: pre-norm attention and a pre-norm gated MLP, each added to the residual
//! stream. Gemma 2 norms each half's output as well before it is added: its
//! `post_attention_layernorm` is that post-norm of attention, and two more norms go around the
//! MLP.

use super::attention::{Attention, Step};
use super::params::ParamSource;
use super::LmConfig;
use crate::io::onnx::export::GraphBuilder;
use crate::nn::{prefixed, GatedMlp, Linear, Module, RmsNorm, SharedExpert, SparseMoe, Summary};
use crate::ops::pre_norm::Stream;
use crate::{Result, Tensor};

pub struct Block {
    pub input_layernorm: RmsNorm,
    pub self_attn: Attention,
    pub post_attention_layernorm: RmsNorm,
    pub mlp: FeedForward,
    /// Gemma 2's norms before and after the MLP (`post_attention_layernorm` then norms
    /// attention's output).
    pub feedforward_norms: Option<FeedforwardNorms>,
}

/// A layer's MLP: one gated MLP, or a sparse mixture of them. One per layer, so the variants'
/// sizes (a few hundred bytes each) do not matter.
#[allow(clippy::large_enum_variant)]
pub enum FeedForward {
    Dense(GatedMlp),
    Sparse(SparseMoe),
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
        let mlp = match c.sparse_layer(layer) {
            true => FeedForward::Sparse(sparse_moe(c, prefix, params)?),
            false => FeedForward::Dense(gated_mlp(
                c,
                &format!("{prefix}.mlp"),
                c.ffn_hidden,
                params,
            )?),
        };
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
                    .forward_residual(h, &self.post_attention_layernorm, None, step)
            }
            Some(ff) => {
                let post = Some(&self.post_attention_layernorm);
                let h = attn.forward(stream, &self.input_layernorm, post, step)?;
                self.mlp.forward_residual(h, &ff.pre, Some(&ff.post), step)
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
            out.extend(prefixed(
                "pre_feedforward_layernorm",
                ff.pre.named_parameters(),
            ));
            out.extend(prefixed(
                "post_feedforward_layernorm",
                ff.post.named_parameters(),
            ));
        }
        out
    }
}

/// A gated MLP of `hidden` under `prefix` (Phi-3's gate and up stored as one).
fn gated_mlp(
    c: &LmConfig,
    prefix: &str,
    hidden: usize,
    params: &mut ParamSource,
) -> Result<GatedMlp> {
    let d = c.d_model;
    let [gate, up] = match c.family.fused_projections() {
        true => params.fused_linears(&format!("{prefix}.gate_up_proj"), d, [hidden, hidden])?,
        false => [
            params.linear(&format!("{prefix}.gate_proj"), d, hidden)?,
            params.linear(&format!("{prefix}.up_proj"), d, hidden)?,
        ],
    };
    let down = params.linear(&format!("{prefix}.down_proj"), hidden, d)?;
    Ok(GatedMlp::new(gate, up, down).with_activation(c.gate_activation()))
}

/// Layer `prefix`'s mixture of experts, read under the model's names (`mlp.gate`,
/// `mlp.experts.gate_up_proj`, ...) or the family's checkpoint names, expert by expert.
fn sparse_moe(c: &LmConfig, prefix: &str, params: &mut ParamSource) -> Result<SparseMoe> {
    let (d, h) = (c.d_model, c.expert_hidden());
    let experts = c.n_experts.unwrap_or(0);
    let (module, [gate, up, down]) = c.family.expert_names();
    let stored = |e: usize, part: &str| format!("{prefix}.{module}.experts.{e}.{part}.weight");
    let router = params.linear_aliased(
        &format!("{prefix}.mlp.gate"),
        &format!("{prefix}.{module}.gate"),
        d,
        experts,
    )?;
    let gate_up = params.experts(
        &format!("{prefix}.mlp.experts.gate_up_proj"),
        [experts, 2 * h, d],
        &|e| vec![(stored(e, gate), h), (stored(e, up), h)],
    )?;
    let down_proj = params.experts(
        &format!("{prefix}.mlp.experts.down_proj"),
        [experts, d, h],
        &|e| vec![(stored(e, down), d)],
    )?;
    let shared = match c.shared_expert_intermediate_size {
        Some(width) => Some(SharedExpert {
            mlp: gated_mlp(c, &format!("{prefix}.mlp.shared_expert"), width, params)?,
            gate: params.linear(&format!("{prefix}.mlp.shared_expert_gate"), d, 1)?,
        }),
        None => None,
    };
    let k = c.experts_per_token.unwrap_or(1);
    Ok(
        SparseMoe::new(router, gate_up, down_proj, k, c.renormalize_experts())?
            .with_activation(c.gate_activation())
            .with_shared(shared),
    )
}

impl FeedForward {
    /// The stream after this half: x + mlp(norm(x)) (normed by `post` first where given); a
    /// sparse layer reports where it sent the tokens to the step's routing record.
    pub fn forward_residual(
        &self,
        stream: Stream,
        norm: &RmsNorm,
        post: Option<&RmsNorm>,
        step: &Step,
    ) -> Result<Stream> {
        match self {
            FeedForward::Dense(mlp) => mlp.forward_residual(stream, norm, post),
            FeedForward::Sparse(moe) => {
                let (scale, eps) = norm.parts()?;
                let (x, normed) = stream.normed((&scale, eps))?;
                let (mut out, routing) = moe.forward_routed(&normed)?;
                if let Some(record) = step.routing {
                    record.borrow_mut().push(routing);
                }
                if let Some(post) = post {
                    let (s, e) = post.parts()?;
                    out = out
                        .to_dtype(x.dtype())?
                        .rms_norm_as(Some(&s), e, x.dtype())?;
                }
                Ok(Stream::with_output(x, out))
            }
        }
    }

    /// The dense projections under their Hugging Face names (none in a sparse layer: its
    /// experts are stacked tensors, not layers).
    pub fn projections(&self) -> Vec<(&'static str, &Linear)> {
        match self {
            FeedForward::Dense(mlp) => mlp.projections().to_vec(),
            FeedForward::Sparse(_) => Vec::new(),
        }
    }

    pub fn projections_mut(&mut self) -> Vec<(&'static str, &mut Linear)> {
        match self {
            FeedForward::Dense(mlp) => mlp.projections_mut().into_iter().collect(),
            FeedForward::Sparse(_) => Vec::new(),
        }
    }

    pub fn as_module(&self) -> &dyn Module {
        match self {
            FeedForward::Dense(mlp) => mlp,
            FeedForward::Sparse(moe) => moe,
        }
    }

    pub fn summary(&self) -> Summary {
        self.as_module().summary()
    }

    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.as_module().named_parameters()
    }

    pub(super) fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        match self {
            FeedForward::Dense(mlp) => mlp.to_onnx(g, prefix, x),
            FeedForward::Sparse(moe) => moe.to_onnx(g, prefix, x),
        }
    }
}
