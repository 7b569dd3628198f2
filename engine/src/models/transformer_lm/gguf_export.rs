//! A `TransformerLm` written as a llama.cpp GGUF file, the inverse of `load_gguf`, as llama.cpp's
//! converter writes its family (`llama` for LLaMA and Mixtral, `qwen2`, `qwen3`, `gemma`,
//! `gemma2`, `phi3`, `qwen2moe`, `qwen3moe`, `olmoe`): the architecture's hyperparameters, each
//! weight under its GGUF name (llama's queries and keys with the converter's row permutation,
//! Gemma's norms plus one, Phi-3's projections fused, the experts' gate and up apart,
//! `output.weight` left out when the head is tied to the embedding), and optionally the
//! tokenizer (`text::gguf::write_tokenizer`). What llama.cpp would run differently (a sliding
//! window on `llama`, RoPE scaling, a score scale or expert renormalisation other than the
//! architecture's) is refused by name.
//!
//! Storage types follow llama.cpp's tools: 1-d tensors (the norms) stay F32 whatever is asked,
//! as `convert_hf_to_gguf.py` keeps them; a 2-d weight whose rows are not whole blocks of the
//! asked type falls back as `llama-quantize` does: Q4_K to Q5_0, and any type whose block still
//! does not divide the rows to F16. Every 2-d weight gets the asked type (llama.cpp's
//! `--pure`), not the Q4_K_M mix that keeps some tensors in Q6_K.

use super::TransformerLm;
use crate::io::gguf::ggml_type::{self as ty, GgmlType};
use crate::io::gguf::llama::{permute_rows, Arch, Permuted, GATE_EXPERTS, UP_EXPERTS};
use crate::io::gguf::{GgufWriter, Value};
use crate::text::gguf::write_tokenizer::tokenizer_metadata;
use crate::text::Tokenizer;
use crate::{DType, Device, Error, Result, Tensor};
use std::collections::BTreeMap;
use std::path::Path;

const OP: &str = "gguf export";

/// The type the 2-d weights are stored in (ggml's names).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgufDType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_K,
}

impl GgufDType {
    pub const NAMES: &'static str = "\"f32\", \"f16\", \"bf16\", \"q8_0\", \"q4_0\", \"q4_k\"";

    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "f32" => GgufDType::F32,
            "f16" => GgufDType::F16,
            "bf16" => GgufDType::BF16,
            "q8_0" => GgufDType::Q8_0,
            "q4_0" => GgufDType::Q4_0,
            "q4_k" => GgufDType::Q4_K,
            _ => {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "unknown GGUF dtype {name:?} (expected one of {})",
                        Self::NAMES
                    ),
                ))
            }
        })
    }

    fn ggml(self) -> GgmlType {
        match self {
            GgufDType::F32 => ty::F32,
            GgufDType::F16 => ty::F16,
            GgufDType::BF16 => ty::BF16,
            GgufDType::Q8_0 => ty::Q8_0,
            GgufDType::Q4_0 => ty::Q4_0,
            GgufDType::Q4_K => ty::Q4_K,
        }
    }

    /// llama.cpp's `general.file_type` (`enum llama_ftype`; Q4_K as `MOSTLY_Q4_K_S`, all of
    /// its weights being Q4_K).
    fn file_type(self) -> u32 {
        match self {
            GgufDType::F32 => 0,
            GgufDType::F16 => 1,
            GgufDType::Q4_0 => 2,
            GgufDType::Q8_0 => 7,
            GgufDType::Q4_K => 14,
            GgufDType::BF16 => 32,
        }
    }
}

#[derive(Clone, Debug)]
pub struct GgufExportOptions {
    pub dtype: GgufDType,
    /// `general.name`.
    pub name: Option<String>,
}

impl Default for GgufExportOptions {
    fn default() -> Self {
        GgufExportOptions {
            dtype: GgufDType::F16,
            name: None,
        }
    }
}

/// What was written.
#[derive(Clone, Debug, Default)]
pub struct GgufExport {
    /// Tensors of each ggml type (`F32`: 9, `Q4_K`: 14, ...).
    pub tensor_types: BTreeMap<String, usize>,
    /// 2-d weights stored in another type than asked: (GGUF name, the type used).
    pub fallbacks: Vec<(String, String)>,
    /// What a reader of the file should know (no tokenizer written).
    pub warnings: Vec<String>,
}

/// The type a tensor of row-major `shape` is stored in when `asked` is wanted.
pub fn storage_type(asked: GgufDType, shape: &[usize]) -> GgmlType {
    if shape.len() < 2 {
        return ty::F32;
    }
    let cols = shape.last().copied().unwrap_or(0) as u64;
    let mut t = asked.ggml();
    if t == ty::Q4_K && !cols.is_multiple_of(t.block_size) {
        t = ty::Q5_0;
    }
    if !cols.is_multiple_of(t.block_size) {
        t = ty::F16;
    }
    t
}

/// The GGUF architecture of `model`, or an error naming what llama.cpp would run differently.
fn architecture(model: &TransformerLm) -> Result<&'static Arch> {
    let c = &model.config;
    let model_type = c.family.model_type();
    let arch = Arch::for_model_type(model_type).ok_or_else(|| {
        Error::invalid(
            OP,
            format!("a {model_type} model has no llama.cpp architecture"),
        )
    })?;
    let refuse = |what: String| {
        Err(Error::invalid(OP, format!("a {model_type} model with {what}: llama.cpp's {} architecture would run it differently", arch.gguf)))
    };
    if c.bidirectional {
        return refuse("bidirectional attention".into());
    }
    if c.rope_scaling.is_some() {
        return refuse("RoPE scaling".into());
    }
    if c.attention_bias && !c.qkv_bias() {
        return refuse("an output projection bias".into());
    }
    let windows: Vec<Option<usize>> = (0..c.n_layers).map(|i| c.layer_window(i)).collect();
    let llama_cpp_windows: Vec<Option<usize>> = match model_type {
        // Gemma 2 slides on even layers; Phi-3 on all (n_swa); the others never.
        "gemma2" => (0..c.n_layers)
            .map(|i| c.sliding_window.filter(|_| i % 2 == 0))
            .collect(),
        "phi3" => vec![c.sliding_window; c.n_layers],
        _ => vec![None; c.n_layers],
    };
    if windows != llama_cpp_windows {
        return refuse(format!("sliding windows {windows:?}"));
    }
    if model_type == "gemma2" {
        let scalar = if c.n_layers == 46 {
            c.d_model / c.n_heads
        } else {
            c.head_dim()
        };
        if c.query_pre_attn_scalar.is_some_and(|s| s != scalar as f64) {
            return refuse(format!(
                "query_pre_attn_scalar {:?}",
                c.query_pre_attn_scalar
            ));
        }
    }
    if arch.has_experts() {
        let llama_cpp = matches!(model_type, "mixtral" | "qwen3_moe");
        if c.renormalize_experts() != llama_cpp {
            return refuse(format!("norm_topk_prob {}", c.renormalize_experts()));
        }
    }
    let head_dim = c.head_dim();
    if !head_dim.is_multiple_of(2) {
        return Err(Error::invalid(
            OP,
            format!("head width {head_dim} is odd; rotary embeddings need an even width"),
        ));
    }
    Ok(arch)
}

/// The architecture's and the `general.*` keys of `model`.
fn hyperparameters(
    model: &TransformerLm,
    arch: &Arch,
    options: &GgufExportOptions,
) -> Result<Vec<(String, Value)>> {
    let c = &model.config;
    let head_dim = c.head_dim();
    let u32_of = |what: &str, v: usize| {
        u32::try_from(v).map_err(|_| Error::invalid(OP, format!("{what} {v} does not fit a u32")))
    };
    let a = arch.gguf;
    let u = |k: &str, v: usize| -> Result<(String, Value)> {
        Ok((format!("{a}.{k}"), Value::U32(u32_of(k, v)?)))
    };
    let f = |k: &str, v: f64| (format!("{a}.{k}"), Value::F32(v as f32));
    let s = |k: &str, v: &str| (k.to_string(), Value::String(v.to_string()));
    let mut keys = vec![
        s("general.architecture", a),
        s(
            "general.name",
            options
                .name
                .as_deref()
                .unwrap_or("RustingBrain TransformerLm"),
        ),
        (
            "general.file_type".into(),
            Value::U32(options.dtype.file_type()),
        ),
        ("general.quantization_version".into(), Value::U32(2)),
        u("context_length", c.max_seq_len)?,
        u("embedding_length", c.d_model)?,
        u("block_count", c.n_layers)?,
        u("feed_forward_length", c.ffn_hidden)?,
        u("attention.head_count", c.n_heads)?,
        u("attention.head_count_kv", c.n_kv_heads)?,
        u("rope.dimension_count", head_dim)?,
        f("rope.freq_base", c.rope_theta),
        f("attention.layer_norm_rms_epsilon", c.norm_eps),
    ];
    if a == "llama" {
        keys.push(u("vocab_size", c.vocab_size)?);
    }
    // The converter writes the head width wherever the config names one.
    if c.head_dim.is_some() || head_dim * c.n_heads != c.d_model {
        keys.push(u("attention.key_length", head_dim)?);
        keys.push(u("attention.value_length", head_dim)?);
    }
    if arch.has_experts() {
        keys.push(u("expert_count", c.n_experts.unwrap_or(0))?);
        keys.push(u("expert_used_count", c.experts_per_token.unwrap_or(1))?);
        if matches!(a, "qwen2moe" | "qwen3moe") {
            keys.push(u("expert_feed_forward_length", c.expert_hidden())?);
        }
        if let Some(width) = c.shared_expert_intermediate_size {
            keys.push(u("expert_shared_feed_forward_length", width)?);
        }
    }
    match a {
        "gemma2" => {
            for (k, v) in [
                ("attn_logit_softcapping", c.attn_logit_softcapping),
                ("final_logit_softcapping", c.final_logit_softcapping),
            ] {
                if let Some(cap) = v {
                    keys.push(f(k, cap));
                }
            }
            if let Some(w) = c.sliding_window {
                keys.push(u("attention.sliding_window", w)?);
            }
        }
        "phi3" => keys.push(u(
            "attention.sliding_window",
            c.sliding_window.unwrap_or(0),
        )?),
        _ => {}
    }
    Ok(keys)
}

/// A weight as the file stores it.
struct GgufWeight {
    /// The GGUF name.
    name: String,
    /// The Hugging Face name, for errors.
    hf: String,
    tensor: Tensor,
    /// llama.cpp's row permutation of queries and keys, where it applies.
    permuted: Option<Permuted>,
}

/// The model's weights as the architecture names them: Phi-3's projections fused, each
/// layer's stacked expert gate and up apart.
fn gguf_weights(model: &TransformerLm, arch: &Arch) -> Result<Vec<GgufWeight>> {
    let c = &model.config;
    let state = match c.family.fused_projections() {
        true => model.checkpoint_state()?,
        false => model.dense_state()?,
    };
    let mut out = Vec::with_capacity(state.len());
    for (hf, t) in state {
        if c.tied_embeddings && hf == "lm_head.weight" {
            continue;
        }
        let parts = match hf.strip_suffix("mlp.experts.gate_up_proj") {
            Some(prefix) => {
                let h = t.dims()[1] / 2;
                vec![
                    (
                        format!("{prefix}{GATE_EXPERTS}"),
                        t.narrow(1, 0, h)?.contiguous_copy()?,
                    ),
                    (
                        format!("{prefix}{UP_EXPERTS}"),
                        t.narrow(1, h, h)?.contiguous_copy()?,
                    ),
                ]
            }
            None => vec![(hf.clone(), t)],
        };
        for (name, t) in parts {
            let (gguf, permuted) = arch.gguf_name(&name).ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!(
                        "weight {name:?} has no counterpart in llama.cpp's {} architecture",
                        arch.gguf
                    ),
                )
            })?;
            out.push(GgufWeight {
                name: gguf,
                hf: name,
                tensor: t,
                permuted,
            });
        }
    }
    Ok(out)
}

/// Writes `model` (and `tokenizer`, if given) to the GGUF file `path`.
pub fn export_gguf(
    model: &TransformerLm,
    tokenizer: Option<&Tokenizer>,
    path: impl AsRef<Path>,
    options: &GgufExportOptions,
) -> Result<GgufExport> {
    let path = path.as_ref();
    let c = &model.config;
    let arch = architecture(model)?;
    let mut w = GgufWriter::new();
    for (k, v) in hyperparameters(model, arch, options)? {
        w.add(&k, v)?;
    }
    let mut report = GgufExport::default();
    match tokenizer {
        Some(tok) => {
            for (k, v) in tokenizer_metadata(tok, c.vocab_size)? {
                w.add(&k, v)?;
            }
        }
        // llama.cpp refuses a file without the key; "none" is its model for a file that
        // carries no vocabulary (which it then refuses too, the embedding being larger).
        None => {
            w.add("tokenizer.ggml.model", Value::String("none".into()))?;
            report.warnings.push(
                "no tokenizer given: the file says tokenizer.ggml.model \"none\", and llama.cpp \
                 (checked with llama-cpp-python 0.3.36) refuses a file whose vocabulary is \
                 smaller than its embedding; pass #{ tokenizer: tok } to include one"
                    .into(),
            );
        }
    }
    // llama.cpp expects the embedding first and the layers in order; name order would put
    // blk.10 before blk.2, which readers accept but people reading a dump do not expect.
    let mut named = gguf_weights(model, arch)?;
    named.sort_by_key(|w| sort_key(&w.name));
    for GgufWeight {
        name,
        hf,
        tensor: t,
        permuted,
    } in named
    {
        let shape = t.dims().to_vec();
        let mut values =
            crate::no_grad(|| t.to_dtype(DType::F32)?.to_device(Device::Cpu))?.to_vec::<f32>()?;
        if let Some(p) = permuted {
            permute_rows(&mut values, &shape, p.heads(c.n_heads, c.n_kv_heads))
                .map_err(|m| Error::invalid(OP, format!("weight {hf:?}: {m}")))?;
        }
        if arch.norms_plus_one && name.ends_with("norm.weight") {
            values.iter_mut().for_each(|v| *v += 1.0);
        }
        let t = storage_type(options.dtype, &shape);
        if shape.len() >= 2 && t != options.dtype.ggml() {
            report.fallbacks.push((name.clone(), t.name.to_string()));
        }
        *report.tensor_types.entry(t.name.to_string()).or_insert(0) += 1;
        w.add_tensor(&name, &shape, &values, t)?;
    }
    w.write(path)?;
    Ok(report)
}

/// The order llama.cpp's converter writes: the embedding, the layers by number, the final norm
/// and the head.
fn sort_key(name: &str) -> (usize, String) {
    if name == "token_embd.weight" {
        return (0, String::new());
    }
    match name
        .strip_prefix("blk.")
        .and_then(|r| r.split_once('.'))
        .and_then(|(n, rest)| Some((n.parse::<usize>().ok()?, rest)))
    {
        Some((layer, rest)) => (layer + 1, rest.to_string()),
        None => (usize::MAX, name.to_string()),
    }
}
