//! The tokenizer a GGUF file carries in its `tokenizer.*` metadata, as our `Tokenizer`, for the
//! two tokenizer models `tokenizer.ggml.model` names here:
//! - `gpt2`, a byte-level BPE (here);
//! - `llama`, a SentencePiece vocabulary with scores (`spm_tokenizer`).
//!
//! Both have the vocabulary (`tokens`), each token's type (`token_types`: control and unknown
//! tokens are matched whole in the text and are special; user-defined ones are matched whole
//! and are not), the special ids and whether llama.cpp puts BOS/EOS around a prompt.
//!
//! A `gpt2` file adds the merges (`"left right"`, tokens already in the byte-level alphabet)
//! and the name of the pre-tokenizer llama.cpp applies (`tokenizer.ggml.pre`). That name stands
//! for a list of split regexes inside llama.cpp; only the names whose splits equal one of ours
//! are accepted, any other is an error naming it. The pieces are assembled as the equivalent
//! `tokenizer.json` and read by `Tokenizer::from_json_str`, so the result is checked exactly as
//! a Hugging Face file is.

use super::format_error;
use super::metadata::Metadata;
use super::token_types::{added_tokens, effective_types};
use crate::text::{AddedToken, Template, Tokenizer, LLAMA3_PATTERN};
use crate::{Error, Result};
use serde_json::{json, Map, Value};

/// Qwen2's split: LLaMA-3's with single digits (`\p{N}` instead of `\p{N}{1,3}`).
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A GGUF file's tokenizer and what llama.cpp reads beside it.
#[derive(Clone, Debug)]
pub struct GgufTokenizer {
    pub tokenizer: Tokenizer,
    /// `tokenizer.ggml.model`: "gpt2" or "llama".
    pub model: String,
    /// `tokenizer.ggml.pre` ("default" when absent).
    pub pre: String,
    pub bos_id: Option<u32>,
    /// The end of a turn for chat models (`<|im_end|>` for SmolLM2-Instruct): the stop token.
    pub eos_id: Option<u32>,
    pub unk_id: Option<u32>,
    pub pad_id: Option<u32>,
    /// Whether llama.cpp puts BOS before a prompt (also in `tokenizer.template().prefix`).
    pub add_bos: bool,
    pub add_eos: bool,
    /// `tokenizer.chat_template`, a Jinja template (not rendered here).
    pub chat_template: Option<String>,
}

/// The pre-tokenizer of a `tokenizer.ggml.pre` name: its `tokenizer.json` object, whether
/// llama.cpp skips the merges for pieces that are whole tokens (`ignore_merges`), and whether
/// it adds BOS when the file does not say.
fn pre_tokenizer(name: &str) -> Option<(Value, bool, bool)> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let split = |pattern: &str| json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false});
    let sequence = |steps: Vec<Value>| json!({"type": "Sequence", "pretokenizers": steps});
    Some(match name {
        "gpt-2" => (byte_level(true), false, false),
        // Each digit alone, then GPT-2's split (llama.cpp's SMOLLM regex list).
        "smollm" => (
            sequence(vec![split(r"\p{N}"), byte_level(true)]),
            false,
            false,
        ),
        "llama3" | "llama-v3" | "llama-bpe" => (
            sequence(vec![split(LLAMA3_PATTERN), byte_level(false)]),
            true,
            true,
        ),
        "qwen2" | "deepseek-r1-qwen" => (
            sequence(vec![split(QWEN2_PATTERN), byte_level(false)]),
            false,
            false,
        ),
        _ => return None,
    })
}

const KNOWN_PRE: &str = "gpt-2, smollm, llama3, llama-v3, llama-bpe, qwen2, deepseek-r1-qwen";

/// An error about metadata key `key` of `file`.
pub(super) fn key_error(file: &str, key: &str, msg: impl std::fmt::Display) -> Error {
    format_error(file, format!("metadata key {key:?}: {msg}"))
}

/// What llama.cpp assumes for a tokenizer model when the file does not say.
struct Defaults {
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    unk_id: Option<u32>,
    add_bos: bool,
}

/// The tokenizer of the file whose metadata is `meta`; `None` when it has none.
pub fn read_tokenizer(meta: &Metadata) -> Result<Option<GgufTokenizer>> {
    let file = &meta.file;
    let err = |key: &str, msg: String| key_error(file, key, msg);
    let Some(model) = meta.opt_str("tokenizer.ggml.model")? else {
        return Ok(None);
    };
    let tokens = meta
        .opt_strings("tokenizer.ggml.tokens")?
        .ok_or_else(|| err("tokenizer.ggml.tokens", "is missing".into()))?;
    let types = meta.opt_i64s("tokenizer.ggml.token_type")?;
    if let Some(t) = &types {
        if t.len() != tokens.len() {
            return Err(err(
                "tokenizer.ggml.token_type",
                format!("has {} entries for {} tokens", t.len(), tokens.len()),
            ));
        }
    }
    let types = effective_types(tokens, types.as_deref());
    let added = added_tokens(tokens, &types, meta.opt_str("general.name")?);
    let pre = meta.opt_str("tokenizer.ggml.pre")?.unwrap_or("default");
    let gpt2_pre = match model {
        "gpt2" => Some(pre_tokenizer(pre).ok_or_else(|| {
            err(
                "tokenizer.ggml.pre",
                format!("pre-tokenizer {pre:?} is not supported (supported: {KNOWN_PRE})"),
            )
        })?),
        "llama" => None,
        other => {
            return Err(err(
                "tokenizer.ggml.model",
                format!("{other:?} is not supported; only \"gpt2\" (byte-level BPE) and \"llama\" (SentencePiece with scores) are"),
            ))
        }
    };
    let defaults = match &gpt2_pre {
        Some((_, _, add_bos)) => Defaults {
            bos_id: None,
            eos_id: None,
            unk_id: None,
            add_bos: *add_bos,
        },
        // llama.cpp's defaults for its SentencePiece model, where the vocabulary has them.
        None => {
            let within = |id: u32| (id as usize) < tokens.len();
            Defaults {
                bos_id: Some(1).filter(|&i| within(i)),
                eos_id: Some(2).filter(|&i| within(i)),
                unk_id: Some(0).filter(|&i| within(i)),
                add_bos: true,
            }
        }
    };
    let id = |key: &str, default: Option<u32>| -> Result<Option<u32>> {
        let full = format!("tokenizer.ggml.{key}");
        match meta.opt_u64(&full)? {
            None => Ok(default),
            Some(i) if (i as usize) < tokens.len() => Ok(Some(i as u32)),
            Some(i) => Err(err(
                &full,
                format!("id {i} is not below the {} tokens", tokens.len()),
            )),
        }
    };
    let bos_id = id("bos_token_id", defaults.bos_id)?;
    let eos_id = id("eos_token_id", defaults.eos_id)?;
    let unk_id = id("unknown_token_id", defaults.unk_id)?;
    let pad_id = id("padding_token_id", None)?;
    let add_bos = meta
        .opt_bool("tokenizer.ggml.add_bos_token")?
        .unwrap_or(defaults.add_bos);
    let add_eos = meta
        .opt_bool("tokenizer.ggml.add_eos_token")?
        .unwrap_or(false);
    let template = |flag: bool, id: Option<u32>, key: &str| -> Result<Option<u32>> {
        match (flag, id) {
            (false, _) => Ok(None),
            (true, Some(i)) => Ok(Some(i)),
            (true, None) => Err(err(key, "is true but the file has no such token id".into())),
        }
    };
    let prefix = template(add_bos, bos_id, "tokenizer.ggml.add_bos_token")?;
    let suffix = template(add_eos, eos_id, "tokenizer.ggml.add_eos_token")?;

    let tokenizer = match gpt2_pre {
        Some((pre_json, ignore_merges, _)) => {
            let merges = meta.opt_strings("tokenizer.ggml.merges")?.ok_or_else(|| {
                err(
                    "tokenizer.ggml.merges",
                    "is missing (a byte-level BPE needs its merges)".into(),
                )
            })?;
            let parts = Gpt2Parts {
                tokens,
                merges,
                added: &added,
                pre_json,
                ignore_merges,
                prefix,
                suffix,
            };
            gpt2_tokenizer(file, parts)?
        }
        None => {
            let template = Template {
                prefix: prefix.into_iter().collect(),
                suffix: suffix.into_iter().collect(),
            };
            super::spm_tokenizer::spm_tokenizer(meta, tokens, added, template)?
        }
    };
    Ok(Some(GgufTokenizer {
        tokenizer,
        model: model.to_string(),
        pre: pre.to_string(),
        bos_id,
        eos_id,
        unk_id,
        pad_id,
        add_bos,
        add_eos,
        chat_template: meta.opt_str("tokenizer.chat_template")?.map(str::to_string),
    }))
}

/// What a `gpt2` tokenizer is assembled from.
struct Gpt2Parts<'a> {
    tokens: &'a [String],
    merges: &'a [String],
    added: &'a [AddedToken],
    pre_json: Value,
    ignore_merges: bool,
    prefix: Option<u32>,
    suffix: Option<u32>,
}

/// The byte-level BPE, as the `tokenizer.json` it amounts to.
fn gpt2_tokenizer(file: &str, p: Gpt2Parts) -> Result<Tokenizer> {
    let added: Vec<Value> = p
        .added
        .iter()
        .map(|t| {
            json!({"id": t.id, "content": t.content, "single_word": false, "lstrip": t.lstrip,
                   "rstrip": t.rstrip, "normalized": false, "special": t.special})
        })
        .collect();
    let mut root = Map::new();
    root.insert("version".into(), "1.0".into());
    root.insert("added_tokens".into(), Value::Array(added));
    root.insert("normalizer".into(), Value::Null);
    root.insert("pre_tokenizer".into(), p.pre_json);
    root.insert(
        "post_processor".into(),
        post_processor(p.tokens, p.prefix, p.suffix),
    );
    root.insert("decoder".into(), json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}));
    root.insert(
        "model".into(),
        bpe_model(p.tokens, p.merges, p.ignore_merges)
            .map_err(|m| key_error(file, "tokenizer.ggml.merges", m))?,
    );
    let text = Value::Object(root).to_string();
    Tokenizer::from_json_str(&text, &format!("{file} (GGUF tokenizer)"))
}

/// BOS and EOS around each sequence, as `add_bos_token` / `add_eos_token` ask.
fn post_processor(tokens: &[String], bos: Option<u32>, eos: Option<u32>) -> Value {
    if bos.is_none() && eos.is_none() {
        return Value::Null;
    }
    let mut single = Vec::new();
    let mut specials = Map::new();
    let mut special = |id: u32, single: &mut Vec<Value>| {
        let name = &tokens[id as usize];
        single.push(json!({"SpecialToken": {"id": name, "type_id": 0}}));
        specials.insert(
            name.clone(),
            json!({"id": name, "ids": [id], "tokens": [name]}),
        );
    };
    if let Some(id) = bos {
        special(id, &mut single);
    }
    single.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
    if let Some(id) = eos {
        special(id, &mut single);
    }
    json!({"type": "TemplateProcessing", "single": single, "pair": [], "special_tokens": specials})
}

/// The BPE model object; a merge is split at its first space after the first byte, as
/// llama.cpp splits it (a token may itself start with a space).
fn bpe_model(
    tokens: &[String],
    merges: &[String],
    ignore_merges: bool,
) -> std::result::Result<Value, String> {
    let vocab: Map<String, Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), Value::from(i)))
        .collect();
    let pairs = merges
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let cut = m
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(at, _)| at)
                .ok_or_else(|| format!("merge {i} {m:?} is not two tokens separated by a space"))?;
            Ok(json!([&m[..cut], &m[cut + 1..]]))
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    Ok(json!({"type": "BPE", "dropout": null, "unk_token": null,
              "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
              "byte_fallback": false, "ignore_merges": ignore_merges, "vocab": vocab,
              "merges": pairs}))
}
