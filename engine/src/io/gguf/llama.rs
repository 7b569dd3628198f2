//! The llama-shaped decoder architectures of a GGUF file in Hugging Face's terms: the
//! hyperparameters as the family's `config.json` object and the tensors under its causal LM's
//! names, so any loader of Hugging Face weights of those families can take them. The names
//! and conventions are those of llama.cpp's converter (`convert_hf_to_gguf.py`):
//!
//! - `llama` (also Mistral, and Mixtral with `expert_count`): the converter permutes the rows
//!   of the query and key projections (its rotary embedding there rotates adjacent pairs,
//!   Hugging Face's the two halves of each head); the permutation is undone here. The other
//!   architectures keep Hugging Face's rows (llama.cpp runs them with the half-split "NEOX"
//!   rotation).
//! - `gemma`, `gemma2`: the converter stores each norm weight plus one (llama.cpp scales by
//!   the weight, Gemma by 1 + weight); one is taken off again.
//! - `phi3`: the fused `attn_qkv` and `ffn_up` (gate, then up) are Hugging Face's fused
//!   `qkv_proj` and `gate_up_proj`.
//! - experts (`mixtral`, `qwen2moe`, `qwen3moe`, `olmoe`): `ffn_{gate,up,down}_exps` are
//!   stacked [experts, rows, cols]; gate and up are joined into the model's `gate_up_proj`.

pub use super::arch::{Arch, Permuted, GATE_EXPERTS, UP_EXPERTS};
use super::arch::{ARCHES, EXPERT_NAMES, LAYER_NAMES, MIXTRAL, TOP_NAMES};
use super::format_error;
use super::ggml_type::GgmlType;
use super::reader::{GgufFile, TensorInfo};
use crate::{no_grad, DType, Result, Tensor};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Seek};

/// The size-bearing hyperparameters of a llama-shaped GGUF.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaHyper {
    /// The architecture, as `general.architecture` names it.
    pub arch: &'static str,
    /// transformers' `model_type` (`mixtral` for a `llama` file with experts).
    pub model_type: &'static str,
    architecture: &'static str,
    /// Whether llama.cpp's converter permuted the query and key rows.
    permuted_rows: bool,
    norms_plus_one: bool,
    names: &'static [(&'static str, &'static str)],
    /// The head width where the file gives one (`attention.key_length`) that is not
    /// d_model / heads.
    pub head_dim: Option<usize>,
    pub vocab_size: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub ffn_hidden: usize,
    pub rope_theta: f64,
    pub context_length: usize,
    pub norm_eps: f64,
    /// No `output.weight`: the head reuses the token embedding.
    pub tied: bool,
    /// The family's own config fields (experts, soft caps, windows).
    extra: serde_json::Map<String, Value>,
}

impl LlamaHyper {
    /// `config.json` as `transformers` writes it for the family's causal LM.
    pub fn hf_config(&self) -> Value {
        let mut config = json!({
            "model_type": self.model_type,
            "architectures": [self.architecture],
            "vocab_size": self.vocab_size,
            "hidden_size": self.d_model,
            "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "intermediate_size": self.ffn_hidden,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.context_length,
            "rms_norm_eps": self.norm_eps,
            "tie_word_embeddings": self.tied,
        });
        if let Some(h) = self.head_dim {
            config["head_dim"] = h.into();
        }
        for (k, v) in &self.extra {
            config[k] = v.clone();
        }
        config
    }
}

/// Reads the hyperparameters; an unknown architecture, rotary scaling, or a rotary width
/// other than the head width is refused by key.
pub fn hyperparameters<R: Read + Seek>(f: &GgufFile<R>) -> Result<LlamaHyper> {
    let m = &f.metadata;
    let err = |msg: String| format_error(f.name(), msg);
    let name = m.str("general.architecture")?;
    let Some(found) = ARCHES.iter().find(|a| a.gguf == name) else {
        let known: Vec<_> = ARCHES.iter().map(|a| format!("{:?}", a.gguf)).collect();
        return Err(err(format!(
            "architecture {name:?} is not supported (supported: {})",
            known.join(", ")
        )));
    };
    let arch = found.gguf;
    let key = |k: &str| format!("{arch}.{k}");
    let size = |k: &str| -> Result<usize> { Ok(m.u64(&key(k))? as usize) };
    let experts = m.opt_u64(&key("expert_count"))?.filter(|&n| n > 0);
    let spec = match (arch, experts) {
        ("llama", Some(_)) => &MIXTRAL,
        (_, None) if found.names == EXPERT_NAMES => {
            return Err(err(format!(
                "metadata key {:?} is missing: a {arch} model has experts",
                key("expert_count")
            )))
        }
        (_, Some(_)) if found.names != EXPERT_NAMES => {
            return Err(err(format!(
                "metadata key {:?}: a {arch} model with experts is not supported",
                key("expert_count")
            )))
        }
        _ => found,
    };
    if let Some(kind) = m.opt_str(&key("rope.scaling.type"))? {
        if kind != "none" {
            return Err(err(format!(
                "metadata key {:?}: rotary scaling {kind:?} is not supported",
                key("rope.scaling.type")
            )));
        }
    }
    let embed = f
        .tensor_info("token_embd.weight")
        .ok_or_else(|| err("tensor \"token_embd.weight\" is missing".into()))?;
    let d_model = size("embedding_length")?;
    let n_heads = size("attention.head_count")?;
    let n_kv_heads = match m.opt_u64(&key("attention.head_count_kv"))? {
        Some(n) => n as usize,
        None => n_heads,
    };
    let head_dim = m
        .opt_u64(&key("attention.key_length"))?
        .map(|h| h as usize)
        .filter(|&h| h.checked_mul(n_heads) != Some(d_model));
    let width = head_dim.unwrap_or(d_model / n_heads.max(1));
    if let Some(rot) = m.opt_u64(&key("rope.dimension_count"))? {
        if rot != width as u64 {
            return Err(err(format!(
                "metadata key {:?}: rotary width {rot} is not the head width {width}; \
                 partial rotary embeddings are not supported",
                key("rope.dimension_count")
            )));
        }
    }
    // The embedding's rows are the model's vocabulary, whatever the tokenizer lists.
    let vocab_size = match embed.shape().as_slice() {
        [v, _] => *v,
        other => {
            return Err(err(format!(
                "tensor \"token_embd.weight\" has shape {other:?}, expected [vocab, width]"
            )))
        }
    };
    let extra = family_fields(spec, m, &key, head_dim.unwrap_or(width), n_heads, d_model)?;
    Ok(LlamaHyper {
        arch,
        model_type: spec.model_type,
        architecture: spec.class,
        permuted_rows: spec.permuted_rows,
        norms_plus_one: spec.norms_plus_one,
        names: spec.names,
        extra,
        head_dim,
        vocab_size,
        d_model,
        n_layers: size("block_count")?,
        n_heads,
        n_kv_heads,
        ffn_hidden: size("feed_forward_length")?,
        rope_theta: m.opt_f64(&key("rope.freq_base"))?.unwrap_or(10000.0),
        context_length: size("context_length")?,
        norm_eps: m
            .opt_f64(&key("attention.layer_norm_rms_epsilon"))?
            .unwrap_or(1e-5),
        tied: f.tensor_info("output.weight").is_none(),
    })
}

/// The config fields of the family that a llama config lacks, read as llama.cpp reads them.
fn family_fields(
    spec: &Arch,
    m: &super::metadata::Metadata,
    key: &dyn Fn(&str) -> String,
    head_dim: usize,
    n_heads: usize,
    d_model: usize,
) -> Result<serde_json::Map<String, Value>> {
    let mut out = serde_json::Map::new();
    let mut put = |k: &str, v: Value| {
        out.insert(k.to_string(), v);
    };
    if spec.model_type == "llama" {
        put("attention_bias", false.into());
    }
    if spec.names == EXPERT_NAMES {
        put("num_experts", m.u64(&key("expert_count"))?.into());
        put(
            "num_experts_per_tok",
            m.u64(&key("expert_used_count"))?.into(),
        );
        if let Some(h) = m.opt_u64(&key("expert_feed_forward_length"))? {
            put("moe_intermediate_size", h.into());
        }
        if let Some(h) = m.opt_u64(&key("expert_shared_feed_forward_length"))? {
            put("shared_expert_intermediate_size", h.into());
        }
        // llama.cpp renormalises the chosen experts' weights for Mixtral and Qwen3-MoE only.
        let renormalise = matches!(spec.model_type, "mixtral" | "qwen3_moe");
        put("norm_topk_prob", renormalise.into());
        if spec.model_type != "mixtral" && spec.model_type != "olmoe" {
            put("decoder_sparse_step", 1.into());
            put("mlp_only_layers", json!([]));
        }
    }
    if let Some(w) = m
        .opt_u64(&key("attention.sliding_window"))?
        .filter(|&w| w > 0)
    {
        put("sliding_window", w.into());
    }
    if spec.model_type == "gemma2" {
        for cap in ["attn_logit_softcapping", "final_logit_softcapping"] {
            put(cap, m.opt_f64(&key(cap))?.map_or(Value::Null, Value::from));
        }
        // llama.cpp scales the queries by head_dim^-1/2, but by (d_model / heads)^-1/2 for
        // the 27B model (46 layers), as Gemma 2's query_pre_attn_scalar says.
        let layers = m.u64(&key("block_count"))?;
        let scalar = if layers == 46 {
            d_model / n_heads
        } else {
            head_dim
        };
        put("query_pre_attn_scalar", scalar.into());
    }
    Ok(out)
}

/// Hugging Face's name for a llama GGUF tensor, and the head count whose row permutation to
/// undo (queries: all heads; keys: the key/value heads).
fn hf_name(name: &str, h: &LlamaHyper) -> Option<(String, Option<usize>)> {
    if let Some((_, hf)) = TOP_NAMES.iter().find(|(g, _)| *g == name) {
        return Some((hf.to_string(), None));
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    if let Some((_, hf)) = h.names.iter().find(|(g, _)| *g == part) {
        return Some((format!("model.layers.{layer}.{hf}"), None));
    }
    let (_, hf, permuted) = LAYER_NAMES.iter().find(|(g, _, _)| *g == part)?;
    let heads = permuted
        .filter(|_| h.permuted_rows)
        .map(|p| p.heads(h.n_heads, h.n_kv_heads));
    Some((format!("model.layers.{layer}.{hf}"), heads))
}

/// A tensor of the file under its Hugging Face name: dequantized, or its blocks as stored.
pub enum HfWeight {
    Dense(Tensor),
    /// A [rows, cols] matrix in `ggml_type`'s blocks, rows already in Hugging Face's order.
    Blocks {
        bytes: Vec<u8>,
        ggml_type: GgmlType,
        shape: [usize; 2],
    },
}

/// Every tensor of the file under its Hugging Face name, one at a time: the blocks of those
/// for which `keep_blocks(hf_name, type)` holds, the rest dequantized and cast to `dtype` on
/// the CPU. A tensor without a mapping (`rope_freqs.weight` of Llama 3.1's scaled rotary
/// embedding, say) is an error naming it, since dropping it would change the model.
pub fn hf_tensors<R: Read + Seek>(
    f: &mut GgufFile<R>,
    h: &LlamaHyper,
    dtype: DType,
    keep_blocks: impl Fn(&str, GgmlType) -> bool,
) -> Result<BTreeMap<String, HfWeight>> {
    let infos: Vec<TensorInfo> = f.tensors.clone();
    let mut out = BTreeMap::new();
    for info in infos {
        let name = &info.name;
        let (hf, heads) = hf_name(name, h).ok_or_else(|| {
            format_error(
                f.name(),
                format!(
                    "tensor {name:?} has no counterpart in a {} model; it is not supported",
                    h.arch
                ),
            )
        })?;
        let shape = info.shape();
        let file = f.name().to_string();
        let bad_rows = |msg: String| format_error(&file, format!("tensor {name:?}: {msg}"));
        if let (true, &[rows, cols]) = (keep_blocks(&hf, info.ggml_type), shape.as_slice()) {
            let mut bytes = f.raw(name)?;
            if let Some(heads) = heads {
                // Whole rows move, so the blocks move unchanged.
                let row_bytes = bytes.len() / rows.max(1);
                unpermute_rows(&mut bytes, &[rows, row_bytes], heads).map_err(bad_rows)?;
            }
            let ggml_type = info.ggml_type;
            out.insert(
                hf,
                HfWeight::Blocks {
                    bytes,
                    ggml_type,
                    shape: [rows, cols],
                },
            );
            continue;
        }
        let (mut values, shape) = f.f32_values(name)?;
        if let Some(heads) = heads {
            unpermute_rows(&mut values, &shape, heads).map_err(bad_rows)?;
        }
        if h.norms_plus_one && name.ends_with("norm.weight") {
            values.iter_mut().for_each(|v| *v -= 1.0);
        }
        let t = Tensor::from_vec(values, &shape)?;
        let t = if dtype == DType::F32 {
            t
        } else {
            no_grad(|| t.to_dtype(dtype))?
        };
        out.insert(hf, HfWeight::Dense(t));
    }
    join_experts(&mut out, f.name())?;
    Ok(out)
}

/// Each layer's stacked expert gate and up projections [experts, hidden, d] as the model's
/// one `gate_up_proj` [experts, 2 hidden, d] (gate rows first).
fn join_experts(out: &mut BTreeMap<String, HfWeight>, file: &str) -> Result<()> {
    let gates: Vec<String> = out
        .keys()
        .filter(|k| k.ends_with(GATE_EXPERTS))
        .cloned()
        .collect();
    for gate_name in gates {
        let prefix = &gate_name[..gate_name.len() - GATE_EXPERTS.len()];
        let up_name = format!("{prefix}{UP_EXPERTS}");
        let missing = || format_error(file, format!("{gate_name} has no {up_name} beside it"));
        let (Some(HfWeight::Dense(gate)), Some(HfWeight::Dense(up))) =
            (out.remove(&gate_name), out.remove(&up_name))
        else {
            return Err(missing());
        };
        let joined = no_grad(|| Tensor::cat(&[gate, up], 1))?;
        out.insert(
            format!("{prefix}mlp.experts.gate_up_proj"),
            HfWeight::Dense(joined),
        );
    }
    Ok(())
}

/// Undoes llama.cpp's query/key row permutation in place. Within each head of `hd` rows, the
/// converter moved row `p * hd/2 + i` (half p, index i) to row `2i + p`; this moves it back.
pub fn unpermute_rows<T: Copy + Default>(
    values: &mut [T],
    shape: &[usize],
    heads: usize,
) -> std::result::Result<(), String> {
    reorder_head_rows(values, shape, heads, |i, p, hd| {
        ((2 * i + p), (p * hd / 2 + i))
    })
}

/// llama.cpp's query/key row permutation, the inverse of `unpermute_rows`: within each head of
/// `hd` rows, row `p * hd/2 + i` (half p, index i) goes to row `2i + p`, so the adjacent-pair
/// rotary embedding of llama.cpp sees the pairs Hugging Face's half-split one rotates.
pub fn permute_rows<T: Copy + Default>(
    values: &mut [T],
    shape: &[usize],
    heads: usize,
) -> std::result::Result<(), String> {
    reorder_head_rows(values, shape, heads, |i, p, hd| {
        ((p * hd / 2 + i), (2 * i + p))
    })
}

/// Moves rows within each head of a [rows, cols] weight: `from_to(i, p, hd)` gives, for index
/// i of half p, the row read and the row written.
fn reorder_head_rows<T: Copy + Default>(
    values: &mut [T],
    shape: &[usize],
    heads: usize,
    from_to: impl Fn(usize, usize, usize) -> (usize, usize),
) -> std::result::Result<(), String> {
    let [rows, cols] = *shape else {
        return Err(format!("expected a 2-d weight, got shape {shape:?}"));
    };
    if heads == 0 || !rows.is_multiple_of(heads) || !(rows / heads).is_multiple_of(2) {
        return Err(format!(
            "{rows} rows do not split into {heads} heads of an even width"
        ));
    }
    let hd = rows / heads;
    if values.is_empty() {
        return Ok(());
    }
    let mut head = vec![T::default(); hd * cols];
    for block in values.chunks_exact_mut(hd * cols) {
        head.copy_from_slice(block);
        for i in 0..hd / 2 {
            for p in 0..2 {
                let (from, to) = from_to(i, p, hd);
                let (from, to) = (from * cols, to * cols);
                block[to..to + cols].copy_from_slice(&head[from..from + cols]);
            }
        }
    }
    Ok(())
}
