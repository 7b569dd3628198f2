//! The configuration of a LLaMA-family decoder. It reads and writes Hugging Face's
//! `config.json` field names (`hidden_size`, `num_key_value_heads`, ...), so a checkpoint's
//! config maps one to one onto `transformers.LlamaConfig`, or onto the config of a family
//! that differs from LLaMA only in switches this model has (`Family`).

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

/// The decoder families that are LLaMA with switches on (`model_type` in config.json).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    #[default]
    Llama,
    /// LLaMA with a sliding attention window.
    Mistral,
    /// LLaMA with biases on q, k and v.
    Qwen2,
    /// LLaMA with an RMS norm on each query and key head before the rotation, and its own
    /// head width.
    Qwen3,
    /// LLaMA with the embeddings scaled by sqrt(hidden_size), norms that scale by
    /// 1 + weight, a tanh-GELU gate (GeGLU) and its own head width.
    Gemma,
    /// Gemma with a norm after each half as well as before, soft-capped attention scores and
    /// logits, its own score scale, and sliding-window layers alternating with full ones.
    Gemma2,
    /// LLaMA with q, k and v stored as one projection (`qkv_proj`) and the gate and up as
    /// another (`gate_up_proj`) in its checkpoints.
    Phi3,
    /// Mistral with a sparse mixture of experts for each MLP, the top 2 of 8 renormalised.
    Mixtral,
    /// Qwen2 with sparse expert layers and a shared expert behind a sigmoid gate.
    #[serde(rename = "qwen2_moe")]
    Qwen2Moe,
    /// Qwen3 with sparse expert layers.
    #[serde(rename = "qwen3_moe")]
    Qwen3Moe,
    /// LLaMA with sparse expert layers and RMS norms over the whole q and k projections.
    Olmoe,
}

impl Family {
    pub const ALL: [Family; 11] = [
        Family::Llama,
        Family::Mistral,
        Family::Qwen2,
        Family::Qwen3,
        Family::Gemma,
        Family::Gemma2,
        Family::Phi3,
        Family::Mixtral,
        Family::Qwen2Moe,
        Family::Qwen3Moe,
        Family::Olmoe,
    ];

    pub fn model_type(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Mistral => "mistral",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Gemma => "gemma",
            Family::Gemma2 => "gemma2",
            Family::Phi3 => "phi3",
            Family::Mixtral => "mixtral",
            Family::Qwen2Moe => "qwen2_moe",
            Family::Qwen3Moe => "qwen3_moe",
            Family::Olmoe => "olmoe",
        }
    }

    /// transformers' class for a causal LM of this family.
    pub fn architecture(self) -> &'static str {
        match self {
            Family::Llama => "LlamaForCausalLM",
            Family::Mistral => "MistralForCausalLM",
            Family::Qwen2 => "Qwen2ForCausalLM",
            Family::Qwen3 => "Qwen3ForCausalLM",
            Family::Gemma => "GemmaForCausalLM",
            Family::Gemma2 => "Gemma2ForCausalLM",
            Family::Phi3 => "Phi3ForCausalLM",
            Family::Mixtral => "MixtralForCausalLM",
            Family::Qwen2Moe => "Qwen2MoeForCausalLM",
            Family::Qwen3Moe => "Qwen3MoeForCausalLM",
            Family::Olmoe => "OlmoeForCausalLM",
        }
    }

    /// The gated MLP's activation as config.json names it (`hidden_act`).
    fn hidden_act(self) -> &'static str {
        match self.is_gemma() {
            true => "gelu_pytorch_tanh",
            false => "silu",
        }
    }

    /// Gemma and Gemma 2: scaled embeddings, 1 + weight norms, a GELU gate.
    fn is_gemma(self) -> bool {
        matches!(self, Family::Gemma | Family::Gemma2)
    }

    /// Whether a config of this family may have a sliding window.
    fn has_window(self) -> bool {
        matches!(
            self,
            Family::Mistral | Family::Gemma2 | Family::Phi3 | Family::Mixtral
        )
    }

    /// The mixture-of-experts families.
    pub fn is_moe(self) -> bool {
        matches!(
            self,
            Family::Mixtral | Family::Qwen2Moe | Family::Qwen3Moe | Family::Olmoe
        )
    }

    /// Where the checkpoints keep a sparse layer's router and experts: Mixtral's
    /// `block_sparse_moe` with w1 (gate), w3 (up) and w2 (down), the others' `mlp` with
    /// transformers' projection names.
    pub fn expert_names(self) -> (&'static str, [&'static str; 3]) {
        match self {
            Family::Mixtral => ("block_sparse_moe", ["w1", "w3", "w2"]),
            _ => ("mlp", ["gate_proj", "up_proj", "down_proj"]),
        }
    }

    /// Whether the checkpoints store q/k/v and gate/up each as one projection (Phi-3).
    pub fn fused_projections(self) -> bool {
        self == Family::Phi3
    }

    fn from_model_type(name: &str) -> Result<Family> {
        Family::ALL
            .into_iter()
            .find(|f| f.model_type() == name)
            .ok_or_else(|| {
                let known: Vec<_> = Family::ALL.iter().map(|f| f.model_type()).collect();
                Error::format(
                    "model config",
                    format!(
                        "model_type \"{name}\" is not a language model this engine runs; it runs {}",
                        known.join(", ")
                    ),
                )
            })
    }
}

/// Ceilings of `validate`, each well above the largest released model (Llama 3 405B: width
/// 16384, 126 layers, FFN 53248, vocab 128256; the widest vocabularies are about 1M).
const MAX_VOCAB: usize = 1 << 24;
const MAX_WIDTH: usize = 1 << 18;
const MAX_FFN: usize = 1 << 20;
const MAX_LAYERS: usize = 1 << 12;
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

    /// The config as Hugging Face writes `config.json` for its family's causal LM
    /// (`LlamaForCausalLM`, `Qwen2ForCausalLM`, ...).
    pub fn to_hf_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert(
                "architectures".into(),
                serde_json::json!([self.family.architecture()]),
            );
            m.insert("hidden_act".into(), self.family.hidden_act().into());
            m.insert("mlp_bias".into(), false.into());
            if matches!(
                self.family,
                Family::Qwen2 | Family::Qwen3 | Family::Qwen2Moe | Family::Qwen3Moe
            ) {
                m.insert("use_sliding_window".into(), false.into());
            }
            // transformers' Mixtral reads its expert count under its own name.
            if self.family == Family::Mixtral {
                if let Some(e) = m.remove("num_experts") {
                    m.insert("num_local_experts".into(), e);
                }
            }
            // transformers' Mistral reads a missing window as 4096: write "none" out.
            if self.family.has_window() && self.sliding_window.is_none() {
                m.insert("sliding_window".into(), serde_json::Value::Null);
            }
            // transformers' Phi-3 takes LongRoPE's pretrained context from the top level
            // first (4096 when absent).
            if let Some(RopeScaling::Longrope {
                original_max_position_embeddings: old,
                ..
            }) = &self.rope_scaling
            {
                m.insert("original_max_position_embeddings".into(), (*old).into());
            }
            // Gemma 2's reader defaults what is absent to its released values: a cap of 50
            // and 30, a scale of 256^-1/2; write what this model has instead.
            if self.family == Family::Gemma2 {
                for cap in ["attn_logit_softcapping", "final_logit_softcapping"] {
                    m.entry(cap).or_insert(serde_json::Value::Null);
                }
                m.entry("query_pre_attn_scalar")
                    .or_insert(self.head_dim().into());
            }
        }
        v
    }

    /// Reads a config written by `to_hf_json` or by `transformers` (unknown fields are ignored,
    /// but a feature this model lacks is refused rather than silently dropped).
    pub fn from_json(text: &str) -> Result<Self> {
        let mut value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| Error::format("model config", e.to_string()))?;
        let family = match value.get("model_type").and_then(|v| v.as_str()) {
            Some(name) => Family::from_model_type(name)?,
            None => Family::Llama,
        };
        normalise_family_fields(&mut value, family)?;
        for (field, ok) in [
            ("mlp_bias", serde_json::Value::Bool(false)),
            (
                "hidden_act",
                serde_json::Value::String(family.hidden_act().into()),
            ),
        ] {
            if let Some(v) = value.get(field) {
                if *v != ok {
                    return Err(Error::format(
                        "model config",
                        format!("{field} = {v} is not supported (only {ok})"),
                    ));
                }
            }
        }
        let mut config: LmConfig = serde_json::from_value(value.clone())
            .map_err(|e| Error::format("model config", e.to_string()))?;
        // transformers leaves num_key_value_heads out when it equals the head count.
        if value.get("num_key_value_heads").is_none_or(|v| v.is_null()) {
            config.n_kv_heads = config.n_heads;
        }
        config.validate()?;
        Ok(config)
    }
}

/// The fields whose meaning differs by family, brought to this config's: Qwen's
/// `sliding_window` only counts under `use_sliding_window` (which, with its per-layer
/// `max_window_layers`, is refused), transformers 5's `rope_parameters` holds the rotary base
/// and any scaling, and `layer_types` may only list full attention (or, for Mistral, its one
/// window).
fn normalise_family_fields(value: &mut serde_json::Value, family: Family) -> Result<()> {
    let refuse = |what: String| Err(Error::format("model config", what));
    let Some(m) = value.as_object_mut() else {
        return refuse("config.json is not an object".into());
    };
    if matches!(
        family,
        Family::Qwen2 | Family::Qwen3 | Family::Qwen2Moe | Family::Qwen3Moe
    ) {
        if m.get("use_sliding_window").and_then(|v| v.as_bool()) == Some(true) {
            return refuse(format!(
                "use_sliding_window = true ({} layers above max_window_layers attending a window) is not supported",
                family.model_type()
            ));
        }
        m.remove("sliding_window");
    }
    if matches!(family, Family::Llama | Family::Olmoe) {
        m.remove("sliding_window");
    }
    if family == Family::Olmoe && m.get("clip_qkv").is_some_and(|v| !v.is_null()) {
        return refuse("clip_qkv (clamping q, k and v) is not supported".into());
    }
    if m.get("router_jitter_noise")
        .and_then(|v| v.as_f64())
        .is_some_and(|j| j != 0.0)
    {
        return refuse("router_jitter_noise (noise on the router's input) is not supported".into());
    }
    // transformers 4 files without the field mean these defaults.
    if matches!(family, Family::Mixtral)
        && !m.contains_key("num_local_experts")
        && !m.contains_key("num_experts")
    {
        m.insert("num_local_experts".into(), 8.into());
    }
    if family.is_moe() && !m.contains_key("router_aux_loss_coef") {
        let coef = if family == Family::Olmoe { 0.01 } else { 0.001 };
        m.insert("router_aux_loss_coef".into(), coef.into());
    }
    if m.get("mlp_only_layers").is_some_and(|v| v.is_null()) {
        m.remove("mlp_only_layers");
    }
    // Defaults of transformers' config classes where they differ from LLaMA's.
    match family {
        Family::Mistral if !m.contains_key("sliding_window") => {
            m.insert("sliding_window".into(), 4096.into());
        }
        _ => {}
    }
    if family.is_gemma() && !m.contains_key("tie_word_embeddings") {
        m.insert("tie_word_embeddings".into(), true.into());
    }
    if family == Family::Gemma2 {
        for (field, default) in [
            ("sliding_window", serde_json::json!(4096)),
            ("query_pre_attn_scalar", serde_json::json!(256)),
            ("attn_logit_softcapping", serde_json::json!(50.0)),
            ("final_logit_softcapping", serde_json::json!(30.0)),
        ] {
            m.entry(field).or_insert(default);
        }
        // transformers 4 alternates by layer index (even layers slide); 5 writes the list.
        if !m.contains_key("layer_types") {
            let layers = m
                .get("num_hidden_layers")
                .and_then(|v| v.as_u64())
                .unwrap_or(0)
                .min(MAX_LAYERS as u64);
            let types: Vec<_> = (0..layers)
                .map(|i| match i % 2 {
                    0 => "sliding_attention",
                    _ => "full_attention",
                })
                .collect();
            m.insert("layer_types".into(), serde_json::json!(types));
        }
    }
    if family.is_gemma() {
        // Gemma's MLP reads hidden_activation (tanh GELU when absent), not hidden_act.
        let act = m
            .get("hidden_activation")
            .and_then(|v| v.as_str())
            .unwrap_or("gelu_pytorch_tanh")
            .to_string();
        if !matches!(act.as_str(), "gelu_pytorch_tanh" | "gelu_new" | "gelu_tanh") {
            return refuse(format!(
                "hidden_activation = \"{act}\" is not supported (only gelu_pytorch_tanh)"
            ));
        }
        m.insert("hidden_act".into(), "gelu_pytorch_tanh".into());
    }
    if let Some(types) = m.get("layer_types").and_then(|v| v.as_array()) {
        let allowed =
            |t: &str| t == "full_attention" || (family.has_window() && t == "sliding_attention");
        if let Some(t) = types
            .iter()
            .filter_map(|t| t.as_str())
            .find(|t| !allowed(t))
        {
            return refuse(format!(
                "layer_types with \"{t}\" layers are not supported in a {} model",
                family.model_type()
            ));
        }
        // All full: the same as none (Qwen and LLaMA files list them).
        if !family.has_window() {
            m.remove("layer_types");
        }
    }
    for cap in [
        "attn_logit_softcapping",
        "final_logit_softcapping",
        "query_pre_attn_scalar",
    ] {
        if m.get(cap).is_some_and(|v| v.is_null()) {
            m.remove(cap);
        }
    }
    // transformers 4 writes `rope_scaling` (its type under "type" in older files), 5 writes
    // `rope_parameters` with the base inside; both become `rope_theta` + `rope_scaling`.
    let mut scaling = m.remove("rope_scaling").filter(|v| !v.is_null());
    if let Some(rope) = m.remove("rope_parameters").filter(|v| v.is_object()) {
        if let Some(theta) = rope
            .get("rope_theta")
            .filter(|_| !m.contains_key("rope_theta"))
        {
            m.insert("rope_theta".into(), theta.clone());
        }
        scaling = scaling.or(Some(rope));
    }
    if let Some(serde_json::Value::Object(mut s)) = scaling {
        if let Some(kind) = s.remove("type").filter(|_| !s.contains_key("rope_type")) {
            s.insert("rope_type".into(), kind);
        }
        s.remove("rope_theta");
        if let Some(f) = s
            .remove("partial_rotary_factor")
            .and_then(|f| f.as_f64())
            .filter(|&f| f != 1.0)
        {
            return refuse(format!(
                "partial_rotary_factor = {f} (rotating part of each head) is not supported"
            ));
        }
        // Phi-3's older files call LongRoPE "su" (or "yarn"); its pretrained context is the
        // top-level original_max_position_embeddings when there is one.
        let phi3_long = matches!(
            s.get("rope_type").and_then(|v| v.as_str()),
            Some("su") | Some("yarn")
        ) && family == Family::Phi3;
        if phi3_long {
            s.insert("rope_type".into(), "longrope".into());
        }
        if s.get("rope_type").and_then(|v| v.as_str()) == Some("longrope") {
            let original = m
                .get("original_max_position_embeddings")
                .or(s.get("original_max_position_embeddings"))
                .or(m.get("max_position_embeddings"))
                .cloned();
            if let Some(o) = original {
                s.insert("original_max_position_embeddings".into(), o);
            }
        }
        let kind = s
            .get("rope_type")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        if let Some(kind) = kind.filter(|k| k != "default") {
            let parsed: RopeScaling = serde_json::from_value(serde_json::Value::Object(s))
                .map_err(|e| {
                    Error::format(
                        "model config",
                        format!(
                            "rope_scaling of rope_type \"{kind}\": {e} (linear, llama3, yarn and longrope run)"
                        ),
                    )
                })?;
            m.insert(
                "rope_scaling".into(),
                serde_json::to_value(parsed).unwrap_or_default(),
            );
        }
    }
    if m.get("head_dim").is_some_and(|v| v.is_null()) {
        m.remove("head_dim");
    }
    Ok(())
}

/// LLaMA's SwiGLU width: 8/3 of d_model rounded up to a multiple of 64.
pub fn swiglu_hidden(d_model: usize) -> usize {
    (8 * d_model / 3).div_ceil(64) * 64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_through_hugging_face_field_names() {
        let mut c = LmConfig::new(100, 64, 2, 4);
        c.n_kv_heads = 2;
        let json = c.to_hf_json();
        assert_eq!(json["hidden_size"], 64);
        assert_eq!(json["num_key_value_heads"], 2);
        assert_eq!(json["model_type"], "llama");
        assert_eq!(LmConfig::from_json(&json.to_string()).unwrap(), c);
    }

    #[test]
    fn validate_names_every_bad_size() {
        let mut c = LmConfig::new(100, 60, 2, 8);
        c.n_kv_heads = 3;
        let msg = c.validate().unwrap_err().to_string();
        assert!(
            msg.contains("d_model 60 is not a multiple of heads 8"),
            "{msg}"
        );
        assert!(
            msg.contains("heads 8 is not a multiple of kv_heads 3"),
            "{msg}"
        );
    }

    #[test]
    fn sizes_far_beyond_any_model_are_refused() {
        let mut json = LmConfig::new(10, 8, 1, 2).to_hf_json();
        json["hidden_size"] = (1u64 << 53).into();
        json["num_hidden_layers"] = (1u64 << 53).into();
        json["max_position_embeddings"] = (1u64 << 40).into();
        let msg = LmConfig::from_json(&json.to_string())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("d_model 9007199254740992 is above"), "{msg}");
        assert!(msg.contains("layers 9007199254740992 is above"), "{msg}");
        assert!(msg.contains("max_seq_len 1099511627776 is above"), "{msg}");
    }

    #[test]
    fn from_json_refuses_features_the_model_lacks() {
        let mut json = LmConfig::new(10, 8, 1, 2).to_hf_json();
        json["mlp_bias"] = true.into();
        let msg = LmConfig::from_json(&json.to_string())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("mlp_bias"), "{msg}");
    }

    #[test]
    fn an_unknown_model_type_is_named_with_the_families_that_run() {
        let mut json = LmConfig::new(10, 8, 1, 2).to_hf_json();
        json["model_type"] = "gpt_neox".into();
        let msg = LmConfig::from_json(&json.to_string())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("\"gpt_neox\""), "{msg}");
        assert!(msg.contains("llama, mistral, qwen2, qwen3, gemma"), "{msg}");
    }

    #[test]
    fn family_switches_follow_model_type_and_round_trip() {
        let mut qwen2 = LmConfig::new(10, 8, 1, 2);
        qwen2.family = Family::Qwen2;
        let json = qwen2.to_hf_json();
        assert_eq!(json["architectures"][0], "Qwen2ForCausalLM");
        let back = LmConfig::from_json(&json.to_string()).unwrap();
        assert_eq!(back, qwen2);
        assert!(back.qkv_bias() && !back.qk_norm());

        // Qwen's sliding_window is inert without use_sliding_window; Mistral's is kept.
        let mut json = json;
        json["sliding_window"] = 4096.into();
        assert_eq!(
            LmConfig::from_json(&json.to_string())
                .unwrap()
                .sliding_window,
            None
        );
        json["use_sliding_window"] = true.into();
        let msg = LmConfig::from_json(&json.to_string())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("use_sliding_window"), "{msg}");
        json["model_type"] = "mistral".into();
        assert_eq!(
            LmConfig::from_json(&json.to_string())
                .unwrap()
                .sliding_window,
            Some(4096)
        );
        // transformers' defaults: a Mistral file without the field has a 4096 window, and one
        // saved here without a window says so.
        let mut no_window = LmConfig::new(10, 8, 1, 2);
        no_window.family = Family::Mistral;
        let saved = no_window.to_hf_json();
        assert!(saved["sliding_window"].is_null());
        assert_eq!(LmConfig::from_json(&saved.to_string()).unwrap(), no_window);
        let mut bare = saved.clone();
        bare.as_object_mut().unwrap().remove("sliding_window");
        assert_eq!(
            LmConfig::from_json(&bare.to_string())
                .unwrap()
                .sliding_window,
            Some(4096)
        );

        // Qwen3: its own head width (q is wider than the stream) and q/k norms.
        json["use_sliding_window"] = false.into();
        json["model_type"] = "qwen3".into();
        json["head_dim"] = 16.into();
        let qwen3 = LmConfig::from_json(&json.to_string()).unwrap();
        assert_eq!(
            (qwen3.head_dim(), qwen3.qk_norm(), qwen3.qkv_bias()),
            (16, true, false)
        );
    }
}
