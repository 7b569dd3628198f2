//! The decoder families that are LLaMA with switches on, by config.json's `model_type`:
//! what each family changes, and where its checkpoints keep what.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};

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
    pub(super) fn hidden_act(self) -> &'static str {
        match self.is_gemma() {
            true => "gelu_pytorch_tanh",
            false => "silu",
        }
    }

    /// Gemma and Gemma 2: scaled embeddings, 1 + weight norms, a GELU gate.
    pub(super) fn is_gemma(self) -> bool {
        matches!(self, Family::Gemma | Family::Gemma2)
    }

    /// Whether a config of this family may have a sliding window.
    pub(super) fn has_window(self) -> bool {
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

    pub(super) fn from_model_type(name: &str) -> Result<Family> {
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
