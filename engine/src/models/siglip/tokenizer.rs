//! SigLIP's tokenizer from a checkpoint folder: `spiece.model` (a SentencePiece Unigram model)
//! read through `text::spiece_model`, with the text clean-up transformers' `SiglipTokenizer`
//! does first: "▁" read as a space, lower-casing (`do_lower_case`), ASCII punctuation
//! (Python's `string.punctuation`) removed, whitespace runs made one space, the ends trimmed.
//! The end token `</s>` closes every prompt, and batches are padded to the full context
//! (`padding="max_length"`, 64), as SigLIP pools the last position. A folder with a
//! `tokenizer.json` (SigLIP 2's Gemma tokenizer) is read from that instead.
//!
//! Python lower-cases a final capital sigma to "ς"; `Lowercase` maps each character alone ("σ").

use crate::models::prompt_tokenizer::{
    config_token, tokenizer_config, Padding, PromptTokenizer, SpecialTokens,
};
use crate::text::spiece_model::SpieceModel;
use crate::text::Tokenizer;
use crate::Result;
use serde_json::{json, Value};
use std::path::Path;

/// Python's `string.punctuation`, as a character class.
const ASCII_PUNCTUATION: &str = r"[!-/:-@\[-`{-~]";
/// Python's `\s` on text: Unicode whitespace and the four separators U+001C..U+001F.
const PYTHON_WHITESPACE: &str = r"[\s\x1c-\x1f]+";

/// The folder's tokenizer, or `None` when it has neither `spiece.model` nor `tokenizer.json`.
/// `max_len` is the text tower's context; `tokenizer_config.json`'s `model_max_length`
/// shortens it.
pub fn from_folder(dir: &Path, max_len: usize) -> Result<Option<PromptTokenizer>> {
    let config = tokenizer_config(dir)?;
    let (spiece, json) = (dir.join("spiece.model"), dir.join("tokenizer.json"));
    let tokenizer = if json.exists() {
        Tokenizer::load(&json)?
    } else if spiece.exists() {
        let lowercase = config
            .get("do_lower_case")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let doc = SpieceModel::read(&spiece)?.tokenizer_json(clean_up(lowercase), true);
        Tokenizer::from_json_value(&doc, &spiece.display().to_string())?
    } else {
        return Ok(None);
    };
    let max_len = config
        .get("model_max_length")
        .and_then(Value::as_u64)
        .map_or(max_len, |m| max_len.min(m as usize));
    let end = config_token(&config, "eos_token").unwrap_or_else(|| "</s>".into());
    let pad = config_token(&config, "pad_token");
    let special = SpecialTokens {
        start: None,
        end: &end,
        pad: pad.as_deref(),
    };
    PromptTokenizer::new("SigLIP", tokenizer, special, max_len, Padding::MaxLength).map(Some)
}

/// `SiglipTokenizer`'s `canonicalize_text`, as normalizers.
fn clean_up(lowercase: bool) -> Vec<Value> {
    let replace = |pattern: Value, content: &str| json!({"type": "Replace", "pattern": pattern, "content": content});
    let mut steps = vec![replace(json!({"String": "▁"}), " ")];
    if lowercase {
        steps.push(json!({"type": "Lowercase"}));
    }
    steps.push(replace(json!({"Regex": ASCII_PUNCTUATION}), ""));
    steps.push(replace(json!({"Regex": PYTHON_WHITESPACE}), " "));
    steps.push(json!({"type": "Strip", "strip_left": true, "strip_right": true}));
    steps
}
