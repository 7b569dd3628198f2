//! The configuration of a LLaMA-family decoder. It reads and writes Hugging Face's
//! `config.json` field names (`hidden_size`, `num_key_value_heads`, ...), so a checkpoint's
//! config maps one to one onto `transformers.LlamaConfig`, or onto the config of a family
//! that differs from LLaMA only in switches this model has (`Family`).

use super::family::Family;
use super::rope_scaling::RopeScaling;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LmConfig {
    pub vocab_size: usize,
    #[serde(rename = "hidden_size")]
    pub d_model: usize,
    #[serde(rename = "num_hidden_layers")]
    pub n_layers: usize,
    #[serde(rename = "num_attention_heads")]
    pub n_heads: usize,
    #[serde(rename = "num_key_value_heads")]
    pub n_kv_heads: usize,
    /// SwiGLU hidden width.
    #[serde(rename = "intermediate_size")]
    pub ffn_hidden: usize,
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    #[serde(rename = "max_position_embeddings")]
    pub max_seq_len: usize,
    #[serde(rename = "rms_norm_eps", default = "default_norm_eps")]
    pub norm_eps: f64,
    /// The output projection reuses the token embedding (no `lm_head.weight`).
    #[serde(rename = "tie_word_embeddings", default)]
    pub tied_embeddings: bool,
    /// Drops the causal mask: every position sees the whole sequence (masked-LM shape).
    #[serde(default)]
    pub bidirectional: bool,
    /// Std of the normal init of every projection and the embedding (HF `initializer_range`).
    #[serde(rename = "initializer_range", default = "default_init_std")]
    pub init_std: f64,
    /// The checkpoint family (`model_type`), which decides the switches below.
    #[serde(rename = "model_type", default)]
    pub family: Family,
    /// Biases on all four attention projections (LLaMA's and Qwen3's `attention_bias`).
    #[serde(default)]
    pub attention_bias: bool,
    /// The width of a head when it is not hidden_size / heads (Qwen3, Gemma).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    /// Each query sees only the keys of the last `sliding_window` positions, itself included
    /// (Mistral).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<usize>,
    /// How the rotary frequencies stretch to a longer context (`rope_scaling`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<RopeScaling>,
    /// The embedding row that never gets a gradient (transformers builds the token embedding
    /// with `padding_idx = pad_token_id`; negative counts from the end, as in PyTorch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_token_id: Option<i64>,
    /// Which layers attend through the sliding window (Gemma 2 alternates); absent, every
    /// layer does when there is a window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_types: Option<Vec<LayerType>>,
    /// Scores are scaled by this to the power -1/2 instead of head_dim's (Gemma 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_pre_attn_scalar: Option<f64>,
    /// Attention scores pass through cap * tanh(score / cap) before the mask (Gemma 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attn_logit_softcapping: Option<f64>,
    /// Logits pass through cap * tanh(logit / cap) (Gemma 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_logit_softcapping: Option<f64>,
    /// Experts of each sparse layer (`num_experts`; Mixtral's `num_local_experts`).
    #[serde(
        rename = "num_experts",
        alias = "num_local_experts",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub n_experts: Option<usize>,
    /// Experts each token goes through.
    #[serde(
        rename = "num_experts_per_tok",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub experts_per_token: Option<usize>,
    /// Each expert's hidden width when it is not `intermediate_size` (Qwen MoE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_intermediate_size: Option<usize>,
    /// Qwen2-MoE's shared expert's hidden width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_expert_intermediate_size: Option<usize>,
    /// The chosen experts' probabilities are divided by their sum (Mixtral: always).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub norm_topk_prob: Option<bool>,
    /// The weight of the load-balancing loss in `loss` when `output_router_logits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_aux_loss_coef: Option<f64>,
    /// The weight of the router z-loss in `loss` when `output_router_logits` (Switch
    /// Transformers' name; transformers' decoder families have none, so 0 there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_z_loss_coef: Option<f64>,
    /// Training adds the load-balancing loss (transformers' switch of the same name).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_router_logits: bool,
    /// Every this many layers is sparse, counting from the first (Qwen MoE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder_sparse_step: Option<usize>,
    /// Layers that keep a dense MLP (Qwen MoE).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mlp_only_layers: Vec<usize>,
}

/// A layer's attention, as transformers' `layer_types` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerType {
    FullAttention,
    SlidingAttention,
}

/// Ceilings of `validate`, each well above the largest released model (Llama 3 405B: width
/// 16384, 126 layers, FFN 53248, vocab 128256; the widest vocabularies are about 1M).
const MAX_VOCAB: usize = 1 << 24;
const MAX_WIDTH: usize = 1 << 18;
const MAX_FFN: usize = 1 << 20;
pub(super) const MAX_LAYERS: usize = 1 << 12;
/// The largest expert counts published are a few hundred (DeepSeek-V3: 256).
const MAX_EXPERTS: usize = 1 << 12;
/// Positions only bound the caches and rotary tables a run asks for, which are sized by use.
const MAX_POSITIONS: usize = 1 << 30;

fn default_rope_theta() -> f64 {
    10000.0
}
fn default_norm_eps() -> f64 {
    1e-5
}
fn default_init_std() -> f64 {
    0.02
}

impl LmConfig {
    /// A small config with the common defaults; callers set the sizes they care about.
    pub fn new(vocab_size: usize, d_model: usize, n_layers: usize, n_heads: usize) -> Self {
        LmConfig {
            vocab_size,
            d_model,
            n_layers,
            n_heads,
            n_kv_heads: n_heads,
            ffn_hidden: swiglu_hidden(d_model),
            rope_theta: default_rope_theta(),
            max_seq_len: 1024,
            norm_eps: default_norm_eps(),
            tied_embeddings: true,
            bidirectional: false,
            init_std: default_init_std(),
            family: Family::Llama,
            attention_bias: false,
            head_dim: None,
            sliding_window: None,
            rope_scaling: None,
            pad_token_id: None,
            n_experts: None,
            experts_per_token: None,
            moe_intermediate_size: None,
            shared_expert_intermediate_size: None,
            norm_topk_prob: None,
            router_aux_loss_coef: None,
            router_z_loss_coef: None,
            output_router_logits: false,
            decoder_sparse_step: None,
            mlp_only_layers: Vec::new(),
            layer_types: None,
            query_pre_attn_scalar: None,
            attn_logit_softcapping: None,
            final_logit_softcapping: None,
        }
    }

    /// The sliding window of layer `i`, if it attends through one.
    pub fn layer_window(&self, i: usize) -> Option<usize> {
        match self.layer_types.as_ref().and_then(|t| t.get(i)) {
            Some(LayerType::FullAttention) => None,
            _ => self.sliding_window,
        }
    }

    /// The attention scores' scale when it is not 1 / sqrt(head_dim).
    pub fn attention_scale(&self) -> Option<f64> {
        self.query_pre_attn_scalar.map(|s| s.powf(-0.5))
    }

    /// Whether each half of a layer norms its output too (Gemma 2's post-norms).
    pub fn post_norms(&self) -> bool {
        self.family == Family::Gemma2
    }

    /// The embedding row `pad_token_id` names, if any.
    pub fn padding_row(&self) -> Option<usize> {
        let p = self.pad_token_id?;
        let row = if p < 0 { self.vocab_size as i64 + p } else { p };
        usize::try_from(row).ok().filter(|&r| r < self.vocab_size)
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.d_model / self.n_heads.max(1))
    }

    /// Whether q, k and v carry biases.
    pub fn qkv_bias(&self) -> bool {
        self.attention_bias || matches!(self.family, Family::Qwen2 | Family::Qwen2Moe)
    }

    /// Whether each query and key head is RMS-normed before the rotation.
    pub fn qk_norm(&self) -> bool {
        matches!(
            self.family,
            Family::Qwen3 | Family::Qwen3Moe | Family::Olmoe
        )
    }

    /// Whether the q and k norms span the whole projection (OLMoE) rather than each head.
    pub fn qk_norm_whole(&self) -> bool {
        self.family == Family::Olmoe
    }

    /// Whether layer `i` has a sparse mixture of experts for its MLP.
    pub fn sparse_layer(&self, i: usize) -> bool {
        self.family.is_moe()
            && !self.mlp_only_layers.contains(&i)
            && (i + 1).is_multiple_of(self.decoder_sparse_step.unwrap_or(1).max(1))
    }

    /// Each expert's hidden width.
    pub fn expert_hidden(&self) -> usize {
        self.moe_intermediate_size.unwrap_or(self.ffn_hidden)
    }

    /// Whether the chosen experts' probabilities are renormalised.
    pub fn renormalize_experts(&self) -> bool {
        self.family == Family::Mixtral || self.norm_topk_prob.unwrap_or(false)
    }

    /// What the decoder's norms add to their weight before scaling (Gemma: 1).
    pub fn norm_offset(&self) -> f64 {
        match self.family.is_gemma() {
            true => 1.0,
            false => 0.0,
        }
    }

    /// What the token embeddings are multiplied by (Gemma: sqrt(hidden_size)).
    pub fn embedding_scale(&self) -> Option<f64> {
        self.family.is_gemma().then(|| (self.d_model as f64).sqrt())
    }

    /// The gated MLP's activation.
    pub fn gate_activation(&self) -> crate::nn::Activation {
        match self.family.is_gemma() {
            true => crate::nn::Activation::GeluTanh,
            false => crate::nn::Activation::Silu,
        }
    }

    /// Query heads per key/value head.
    pub fn group_size(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }

    /// Every size the model needs, checked at once so the error lists what is wrong. Each
    /// size also has a ceiling far above any published model, so a corrupt `config.json`
    /// (`hidden_size` = 2^53) is refused before it sizes anything.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        for (name, v, max) in [
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            ("d_model", self.d_model, MAX_WIDTH),
            ("layers", self.n_layers, MAX_LAYERS),
            ("heads", self.n_heads, MAX_WIDTH),
            ("kv_heads", self.n_kv_heads, MAX_WIDTH),
            ("ffn_hidden", self.ffn_hidden, MAX_FFN),
            ("max_seq_len", self.max_seq_len, MAX_POSITIONS),
        ] {
            if v == 0 {
                problems.push(format!("{name} must be positive"));
            } else if v > max {
                problems.push(format!("{name} {v} is above the limit {max}"));
            }
        }
        let explicit_width = self.head_dim.is_some();
        if self.n_heads > 0 && !explicit_width && !self.d_model.is_multiple_of(self.n_heads) {
            problems.push(format!(
                "d_model {} is not a multiple of heads {}",
                self.d_model, self.n_heads
            ));
        }
        if self.head_dim == Some(0) || self.head_dim.is_some_and(|h| h > MAX_WIDTH) {
            problems.push(format!(
                "head_dim {} is not a usable head width",
                self.head_dim.unwrap_or(0)
            ));
        } else if self.n_heads > 0
            && (explicit_width || self.d_model.is_multiple_of(self.n_heads))
            && !self.head_dim().is_multiple_of(2)
        {
            problems.push(format!(
                "head dim {} must be even for rotary embeddings",
                self.head_dim()
            ));
        }
        if self.n_kv_heads > 0 && !self.n_heads.is_multiple_of(self.n_kv_heads) {
            problems.push(format!(
                "heads {} is not a multiple of kv_heads {}",
                self.n_heads, self.n_kv_heads
            ));
        }
        if !(self.rope_theta > 0.0 && self.rope_theta.is_finite()) {
            problems.push(format!(
                "rope_theta must be positive, got {}",
                self.rope_theta
            ));
        }
        if !(self.norm_eps > 0.0 && self.norm_eps.is_finite()) {
            problems.push(format!("norm_eps must be positive, got {}", self.norm_eps));
        }
        if self.pad_token_id.is_some() && self.padding_row().is_none() {
            problems.push(format!(
                "pad_token_id {} is outside the vocabulary of {}",
                self.pad_token_id.unwrap_or_default(),
                self.vocab_size
            ));
        }
        if let Some(scaling) = &self.rope_scaling {
            problems.extend(scaling.problems());
        }
        if let Some(RopeScaling::Longrope {
            short_factor,
            long_factor,
            original_max_position_embeddings,
            ..
        }) = &self.rope_scaling
        {
            let half = self.head_dim.unwrap_or(self.d_model / self.n_heads.max(1)) / 2;
            for (name, f) in [("short_factor", short_factor), ("long_factor", long_factor)] {
                if f.len() != half {
                    problems.push(format!(
                        "longrope {name} has {} entries, a head has {half} frequencies",
                        f.len()
                    ));
                }
                if f.iter().any(|x| !(*x > 0.0 && x.is_finite())) {
                    problems.push(format!("longrope {name} must be positive"));
                }
            }
            if *original_max_position_embeddings == 0 {
                problems.push("original_max_position_embeddings must be positive".into());
            }
        }
        if self.sliding_window.is_some() && !self.family.has_window() {
            problems.push(format!(
                "sliding_window is a switch of mistral, gemma2 and phi3; a {} model has none",
                self.family.model_type()
            ));
        }
        if let Some(types) = &self.layer_types {
            if types.len() != self.n_layers {
                problems.push(format!(
                    "layer_types lists {} layers, the model has {}",
                    types.len(),
                    self.n_layers
                ));
            }
            if types.contains(&LayerType::SlidingAttention) && self.sliding_window.is_none() {
                problems
                    .push("layer_types has sliding layers but there is no sliding_window".into());
            }
        }
        if self.family.is_moe() {
            match (self.n_experts, self.experts_per_token) {
                (Some(e), Some(k)) if e > 0 && k > 0 && k <= e && e <= MAX_EXPERTS => {}
                (e, k) => problems.push(format!(
                    "a {} model needs 0 < num_experts_per_tok <= num_experts <= {MAX_EXPERTS}, got {} and {}",
                    self.family.model_type(),
                    k.map_or("none".into(), |k| k.to_string()),
                    e.map_or("none".into(), |e| e.to_string())
                )),
            }
            if self.moe_intermediate_size == Some(0) || self.expert_hidden() > MAX_FFN {
                problems.push("moe_intermediate_size must be positive".into());
            }
        }
        if self.family == Family::Qwen2Moe && self.shared_expert_intermediate_size.is_none() {
            problems.push("a qwen2_moe model needs shared_expert_intermediate_size".into());
        }
        for (name, v) in [
            ("query_pre_attn_scalar", self.query_pre_attn_scalar),
            ("attn_logit_softcapping", self.attn_logit_softcapping),
            ("final_logit_softcapping", self.final_logit_softcapping),
        ] {
            if let Some(v) = v.filter(|v| !(*v > 0.0 && v.is_finite())) {
                problems.push(format!("{name} must be positive, got {v}"));
            }
        }
        if self.sliding_window == Some(0) {
            problems.push("sliding_window must be positive".into());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid("TransformerLm config", problems.join("; ")))
        }
    }
}

/// LLaMA's SwiGLU width: 8/3 of d_model rounded up to a multiple of 64.
pub fn swiglu_hidden(d_model: usize) -> usize {
    (8 * d_model / 3).div_ceil(64) * 64
}
