//! The tokenizer a GGUF file carries in its `tokenizer.*` metadata, as our `Tokenizer`, for the
//! two tokenizer models `tokenizer.ggml.model` names here: `gpt2`, a byte-level BPE
//! (`gpt2_tokenizer`), and `llama`, a SentencePiece vocabulary with scores (`spm_tokenizer`).
//!
//! What both have is read here: the vocabulary (`tokens`), each token's type (`token_types`:
//! control and unknown tokens are matched whole in the text and are special; user-defined ones
//! are matched whole and are not), the special ids and whether llama.cpp puts BOS/EOS around a
//! prompt, with llama.cpp's defaults for each model where the file does not say.

use super::gpt2_tokenizer::{gpt2_tokenizer, pre_tokenizer, Gpt2Parts, KNOWN_PRE};
use super::token_types::{added_tokens, effective_types};
use crate::io::gguf::format_error;
use crate::io::gguf::metadata::Metadata;
use crate::text::{Template, Tokenizer};
use crate::{Error, Result};

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

/// The tokenizer of the GGUF file at `path`, with or without weights beside it (llama.cpp's
/// vocabulary-only files too); an error when the file carries none.
pub fn load_tokenizer(path: impl AsRef<std::path::Path>) -> Result<GgufTokenizer> {
    let file = crate::io::gguf::GgufFile::open(path)?;
    read_tokenizer(&file.metadata)?.ok_or_else(|| {
        key_error(
            file.name(),
            "tokenizer.ggml.model",
            "is missing: the file carries no tokenizer",
        )
    })
}

/// The tokenizer of the file whose metadata is `meta`; `None` when it has none.
pub fn read_tokenizer(meta: &Metadata) -> Result<Option<GgufTokenizer>> {
    let file = &meta.file;
    let err = |key: &str, msg: String| key_error(file, key, msg);
    // llama.cpp's models for a file with no vocabulary.
    let Some(model) = meta
        .opt_str("tokenizer.ggml.model")?
        .filter(|m| !matches!(*m, "none" | "no_vocab"))
    else {
        return Ok(None);
    };
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
