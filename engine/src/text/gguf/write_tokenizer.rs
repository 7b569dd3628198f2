//! Our byte-level BPE `Tokenizer` as GGUF `tokenizer.*` metadata that llama.cpp reads as its
//! `gpt2` tokenizer model, the inverse of `tokenizer::read_tokenizer`.
//!
//! llama.cpp does not read a pre-tokenizer from the file: `tokenizer.ggml.pre` names one of
//! the split-regex lists compiled into it. So a tokenizer is written only when its own
//! pre-tokenizer is one llama.cpp has under a name, the same names the loader reads (GPT-2's
//! `gpt-2`, SmolLM's `smollm`, LLaMA-3's `llama-bpe`, Qwen2's `qwen2`). Anything else, a normalizer, byte fallback, an unknown token, or a template
//! llama.cpp cannot express (more than BOS before and EOS after), is refused by name.
//!
//! Token types follow llama.cpp's converter: special added tokens are control (3), other added
//! tokens user-defined (4), ids the model has but the tokenizer lacks `[PAD{id}]` unused (5),
//! the rest normal (1).
//!
//! One difference llama.cpp fixes by name: under `llama-bpe` it takes a piece that is itself a
//! token whole (`ignore_merges`), under `gpt-2` it merges it. A tokenizer whose flag differs is
//! refused only when the difference shows: when some token, encoded alone, does not come out as
//! itself.

use super::gpt2_tokenizer::pre_tokenizer;
use crate::io::gguf::metadata::{Array, Value};
use crate::text::hf_json::pre_tokenizer_json;
use crate::text::pretokenize::Start;
use crate::text::Tokenizer;
use crate::{Error, Result};

const OP: &str = "gguf export";

const TYPE_NORMAL: i32 = 1;
const TYPE_CONTROL: i32 = 3;
const TYPE_USER_DEFINED: i32 = 4;
const TYPE_UNUSED: i32 = 5;

/// The names llama.cpp knows a pre-tokenizer by, one for each split the loader accepts
/// (`gpt2_tokenizer::pre_tokenizer`; `llama3` and `llama-v3` are other names of `llama-bpe`,
/// `starcoder` and `refact` of `smollm`, `deepseek-r1-qwen` of `qwen2`).
const EXPORTED_PRE: [&str; 6] = [
    "gpt-2",
    "smollm",
    "llama-bpe",
    "qwen2",
    "deepseek-llm",
    "deepseek-coder",
];

/// llama.cpp's name for our pre-tokenizer, and whether llama.cpp ignores merges under it: the
/// name whose split, as the loader builds it, is ours stage for stage.
fn pre_name(tok: &Tokenizer) -> Result<(&'static str, bool)> {
    let ours = pre_tokenizer_json(tok.pre_tokenizer());
    EXPORTED_PRE
        .into_iter()
        .find_map(|name| {
            let (json, ignore_merges, _) = pre_tokenizer(name)?;
            (json == ours).then_some((name, ignore_merges))
        })
        .ok_or_else(|| {
            Error::invalid(
                OP,
                format!(
                    "the tokenizer's pre-tokenizer {ours} is not one llama.cpp knows by name; \
                     these can be exported: {}",
                    EXPORTED_PRE.join(", ")
                ),
            )
        })
}

/// The tokens, given whole, that the tokenizer does not encode as themselves (what
/// `ignore_merges` would change), at most `limit` of them.
fn tokens_merged_otherwise(tok: &Tokenizer, tokens: &[String], limit: usize) -> Vec<String> {
    let added: std::collections::HashSet<u32> = tok.added_tokens().iter().map(|t| t.id).collect();
    let mut out = Vec::new();
    for (id, t) in tokens.iter().enumerate() {
        if added.contains(&(id as u32)) || t.starts_with("[PAD") {
            continue;
        }
        let Some(bytes) = crate::text::byte_level::decode_chars(t) else {
            continue;
        };
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        // Only a token that the pre-tokenizer keeps as one piece can be taken whole.
        let mut pieces = 0;
        let _ = tok
            .pre_tokenizer()
            .for_each_piece(&text, Start::Input, &mut |_| {
                pieces += 1;
                Ok(())
            });
        if pieces != 1 {
            continue;
        }
        if tok.encode_ordinary(&text).ok().as_deref() != Some(&[id as u32][..]) {
            out.push(t.clone());
            if out.len() == limit {
                break;
            }
        }
    }
    out
}

/// The `tokenizer.*` key/values of `tok` for a model of `vocab_size` ids.
pub fn tokenizer_metadata(tok: &Tokenizer, vocab_size: usize) -> Result<Vec<(String, Value)>> {
    if !tok.is_byte_level_bpe() {
        return Err(Error::invalid(
            OP,
            "the tokenizer is not a byte-level BPE (it spells tokens as characters, with byte \
             fallback or an unknown token); llama.cpp's gpt2 tokenizer model needs GPT-2's \
             byte-level alphabet",
        ));
    }
    if !tok.parts().normalizer.steps.is_empty() {
        return Err(Error::invalid(
            OP,
            format!(
                "the tokenizer has a normalizer ({:?}); llama.cpp's gpt2 tokenizer model applies none",
                tok.parts().normalizer.steps
            ),
        ));
    }
    let (pre, llama_ignores_merges) = pre_name(tok)?;
    if tok.vocab_size() > vocab_size {
        return Err(Error::invalid(
            OP,
            format!(
                "the tokenizer has {} ids but the model's embedding only {vocab_size}",
                tok.vocab_size()
            ),
        ));
    }
    let mut tokens = Vec::with_capacity(vocab_size);
    let mut types = Vec::with_capacity(vocab_size);
    for id in 0..vocab_size as u32 {
        match (
            tok.added_tokens().iter().find(|t| t.id == id),
            tok.id_to_token(id),
        ) {
            (Some(a), _) => {
                tokens.push(a.content.clone());
                types.push(if a.special {
                    TYPE_CONTROL
                } else {
                    TYPE_USER_DEFINED
                });
            }
            (None, Some(t)) => {
                tokens.push(t);
                types.push(TYPE_NORMAL);
            }
            (None, None) => {
                tokens.push(format!("[PAD{id}]"));
                types.push(TYPE_UNUSED);
            }
        }
    }
    if tok.ignores_merges() != llama_ignores_merges {
        let differ = tokens_merged_otherwise(tok, &tokens, 3);
        if !differ.is_empty() {
            return Err(Error::invalid(
                OP,
                format!(
                    "llama.cpp's {pre:?} pre-tokenizer {} merges for a piece that is a token, \
                     and this tokenizer {} (tokens such as {differ:?} would encode differently)",
                    if llama_ignores_merges {
                        "skips"
                    } else {
                        "applies"
                    },
                    if tok.ignores_merges() {
                        "skips them"
                    } else {
                        "applies them"
                    },
                ),
            ));
        }
    }
    let merges: Vec<String> = tok
        .merges()
        .into_iter()
        .map(|(a, b)| format!("{a} {b}"))
        .collect();
    let template = tok.template();
    if template.prefix.len() > 1 || template.suffix.len() > 1 {
        return Err(Error::invalid(
            OP,
            format!(
                "the tokenizer's template puts {:?} before and {:?} after a text; llama.cpp \
                 adds at most one BOS before and one EOS after",
                template.prefix, template.suffix
            ),
        ));
    }
    let eos = template.suffix.first().copied().or(tok.eos_id());
    // GPT-2 style vocabularies have no BOS of their own: llama.cpp's converter writes the
    // end-of-text id for both.
    let bos = template.prefix.first().copied().or(eos);
    let mut out = vec![
        (
            "tokenizer.ggml.model".to_string(),
            Value::String("gpt2".into()),
        ),
        ("tokenizer.ggml.pre".to_string(), Value::String(pre.into())),
        (
            "tokenizer.ggml.tokens".to_string(),
            Value::Array(Array::String(tokens)),
        ),
        (
            "tokenizer.ggml.token_type".to_string(),
            Value::Array(Array::I32(types)),
        ),
        (
            "tokenizer.ggml.merges".to_string(),
            Value::Array(Array::String(merges)),
        ),
    ];
    if let Some(id) = bos {
        out.push(("tokenizer.ggml.bos_token_id".into(), Value::U32(id)));
    }
    if let Some(id) = eos {
        out.push(("tokenizer.ggml.eos_token_id".into(), Value::U32(id)));
    }
    out.push((
        "tokenizer.ggml.add_bos_token".into(),
        Value::Bool(!template.prefix.is_empty()),
    ));
    out.push((
        "tokenizer.ggml.add_eos_token".into(),
        Value::Bool(!template.suffix.is_empty()),
    ));
    Ok(out)
}
