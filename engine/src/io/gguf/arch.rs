//! The llama-shaped architectures llama.cpp's converter writes, as transformers families:
//! each one's tensor names both ways and its conventions (permuted query/key rows, norms
//! stored plus one, experts stacked).

/// A GGUF architecture as a transformers family.
pub struct Arch {
    /// `general.architecture`.
    pub gguf: &'static str,
    /// transformers' `model_type` and causal-LM class.
    pub(super) model_type: &'static str,
    pub(super) class: &'static str,
    /// Whether llama.cpp's converter permuted the query and key rows.
    pub permuted_rows: bool,
    /// Whether the converter stored each norm weight plus one (Gemma).
    pub norms_plus_one: bool,
    /// Layer tensors named otherwise than in `LAYER_NAMES` (GGUF, Hugging Face).
    pub(super) names: &'static [(&'static str, &'static str)],
}

pub(super) const EXPERT_NAMES: &[(&str, &str)] = &[
    ("ffn_gate_inp.weight", "mlp.gate.weight"),
    ("ffn_gate_exps.weight", GATE_EXPERTS),
    ("ffn_up_exps.weight", UP_EXPERTS),
    ("ffn_down_exps.weight", "mlp.experts.down_proj"),
    ("ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"),
    (
        "ffn_gate_shexp.weight",
        "mlp.shared_expert.gate_proj.weight",
    ),
    ("ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"),
    (
        "ffn_down_shexp.weight",
        "mlp.shared_expert.down_proj.weight",
    ),
];

/// The experts' gate and up projections as read, before they are joined (`join_experts`), and
/// as written, after they are split.
pub const GATE_EXPERTS: &str = "mlp.experts.gate_proj";
pub const UP_EXPERTS: &str = "mlp.experts.up_proj";

const fn arch(gguf: &'static str, model_type: &'static str, class: &'static str) -> Arch {
    Arch {
        gguf,
        model_type,
        class,
        permuted_rows: false,
        norms_plus_one: false,
        names: &[],
    }
}

/// The architectures read. `llama` with experts reads as Mixtral (`MIXTRAL`).
pub(super) const ARCHES: [Arch; 9] = [
    Arch {
        permuted_rows: true,
        ..arch("llama", "llama", "LlamaForCausalLM")
    },
    arch("qwen2", "qwen2", "Qwen2ForCausalLM"),
    arch("qwen3", "qwen3", "Qwen3ForCausalLM"),
    Arch {
        norms_plus_one: true,
        ..arch("gemma", "gemma", "GemmaForCausalLM")
    },
    Arch {
        norms_plus_one: true,
        names: &[
            ("ffn_norm.weight", "pre_feedforward_layernorm.weight"),
            (
                "post_attention_norm.weight",
                "post_attention_layernorm.weight",
            ),
            ("post_ffw_norm.weight", "post_feedforward_layernorm.weight"),
        ],
        ..arch("gemma2", "gemma2", "Gemma2ForCausalLM")
    },
    Arch {
        names: &[
            ("attn_qkv.weight", "self_attn.qkv_proj.weight"),
            ("ffn_up.weight", "mlp.gate_up_proj.weight"),
        ],
        ..arch("phi3", "phi3", "Phi3ForCausalLM")
    },
    Arch {
        names: EXPERT_NAMES,
        ..arch("qwen2moe", "qwen2_moe", "Qwen2MoeForCausalLM")
    },
    Arch {
        names: EXPERT_NAMES,
        ..arch("qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM")
    },
    Arch {
        names: EXPERT_NAMES,
        ..arch("olmoe", "olmoe", "OlmoeForCausalLM")
    },
];

impl Arch {
    /// The architecture a transformers `model_type` is written as.
    pub fn for_model_type(model_type: &str) -> Option<&'static Arch> {
        // Mistral is LLaMA to llama.cpp (with no sliding window).
        let model_type = if model_type == "mistral" {
            "llama"
        } else {
            model_type
        };
        std::iter::once(&MIXTRAL)
            .chain(&ARCHES)
            .find(|a| a.model_type == model_type)
    }

    /// Whether the architecture has experts.
    pub fn has_experts(&self) -> bool {
        self.names == EXPERT_NAMES
    }

    /// The GGUF name of a Hugging Face tensor of this family, and whether its rows are to be
    /// permuted (`permute_rows`) as llama.cpp's converter does; `None` for a name with no
    /// counterpart.
    pub fn gguf_name(&self, hf: &str) -> Option<(String, Option<Permuted>)> {
        if let Some((g, _)) = TOP_NAMES.iter().find(|(_, h)| *h == hf) {
            return Some((g.to_string(), None));
        }
        let rest = hf.strip_prefix("model.layers.")?;
        let (layer, part) = rest.split_once('.')?;
        let layer: usize = layer.parse().ok()?;
        if let Some((g, _)) = self.names.iter().find(|(_, h)| *h == part) {
            return Some((format!("blk.{layer}.{g}"), None));
        }
        let (g, _, permuted) = LAYER_NAMES.iter().find(|(_, h, _)| *h == part)?;
        Some((
            format!("blk.{layer}.{g}"),
            permuted.filter(|_| self.permuted_rows),
        ))
    }
}

pub(super) const MIXTRAL: Arch = Arch {
    permuted_rows: true,
    names: EXPERT_NAMES,
    ..arch("llama", "mixtral", "MixtralForCausalLM")
};

/// Which head count a tensor's rows are permuted by: queries (all heads) or keys (key/value
/// heads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permuted {
    Queries,
    Keys,
}

/// A layer's tensors: the GGUF name after `blk.N.`, Hugging Face's after `model.layers.N.`.
pub(super) const LAYER_NAMES: &[(&str, &str, Option<Permuted>)] = &[
    (
        "attn_q.weight",
        "self_attn.q_proj.weight",
        Some(Permuted::Queries),
    ),
    (
        "attn_k.weight",
        "self_attn.k_proj.weight",
        Some(Permuted::Keys),
    ),
    ("attn_v.weight", "self_attn.v_proj.weight", None),
    // Qwen2's biases and Qwen3's head norms (never permuted: those files keep HF's rows).
    ("attn_q.bias", "self_attn.q_proj.bias", None),
    ("attn_k.bias", "self_attn.k_proj.bias", None),
    ("attn_v.bias", "self_attn.v_proj.bias", None),
    ("attn_q_norm.weight", "self_attn.q_norm.weight", None),
    ("attn_k_norm.weight", "self_attn.k_norm.weight", None),
    ("attn_output.weight", "self_attn.o_proj.weight", None),
    ("ffn_gate.weight", "mlp.gate_proj.weight", None),
    ("ffn_up.weight", "mlp.up_proj.weight", None),
    ("ffn_down.weight", "mlp.down_proj.weight", None),
    ("attn_norm.weight", "input_layernorm.weight", None),
    ("ffn_norm.weight", "post_attention_layernorm.weight", None),
];

/// The tensors outside the layers.
pub(super) const TOP_NAMES: &[(&str, &str)] = &[
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
];

impl Permuted {
    pub fn heads(self, n_heads: usize, n_kv_heads: usize) -> usize {
        match self {
            Permuted::Queries => n_heads,
            Permuted::Keys => n_kv_heads,
        }
    }
}
