//! Reading and writing Hugging Face `tokenizer.json` for BPE models (byte-level, and
//! SentencePiece-style with byte fallback). Every field that would change the ids or the
//! decoded text is either implemented or refused with an error naming it; nothing unsupported
//! is silently ignored. Fields that only shape offsets (`trim_offsets`) are.

mod read;
mod stages;
mod write;

pub(crate) use write::pre_tokenizer_json;

pub(crate) use write::byte_level_post_processor;

use super::tokenizer::Tokenizer;
use crate::{Error, Result};
use serde_json::Value;
use std::path::Path;

const FORMAT: &str = "tokenizer.json";

/// An error about field `field` of the file at `path`.
fn field_error(path: &str, field: &str, msg: impl std::fmt::Display) -> Error {
    Error::format(FORMAT, format!("{path}: {field}: {msg}"))
}

impl Tokenizer {
    /// Loads a Hugging Face `tokenizer.json` with a BPE model.
    pub fn load(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Tokenizer::from_json_str(&text, &path.display().to_string())
    }

    /// Parses `tokenizer.json` text; `name` (a path) goes into error messages.
    pub fn from_json_str(text: &str, name: &str) -> Result<Tokenizer> {
        let root: Value = serde_json::from_str(text)
            .map_err(|e| Error::format(FORMAT, format!("{name}: not valid JSON: {e}")))?;
        Tokenizer::from_json_value(&root, name)
    }

    /// A `tokenizer.json` document already parsed (or built, as CLIP's from its vocab and
    /// merges files).
    pub fn from_json_value(root: &Value, name: &str) -> Result<Tokenizer> {
        let root = root
            .as_object()
            .ok_or_else(|| field_error(name, "(top level)", "expected a JSON object"))?;
        read::Reader { name, root }.tokenizer()
    }
}
