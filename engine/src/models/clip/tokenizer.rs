//! CLIP's tokenizer from a checkpoint folder: `tokenizer.json` where it has one, else the
//! older `vocab.json` + `merges.txt` pair, read with the pipeline transformers builds for CLIP
//! (NFC, whitespace runs to one space, lower-casing; CLIP's word pattern; byte-level BPE with
//! `</w>` closing each word; `<|startoftext|>` … `<|endoftext|>` around every text). Batches
//! come out right-padded with the folder's pad token and cut to the model's context.

use crate::models::prompt_tokenizer::{
    config_token, tokenizer_config, Padding, PromptTokenizer, SpecialTokens,
};
use crate::text::Tokenizer;
use crate::{Error, Result};
use serde_json::{json, Value};
use std::path::Path;

/// CLIP's word pattern: its special tokens, English contractions, letter runs, single digits,
/// and runs of anything else that is not space.
const WORD_PATTERN: &str =
    r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+";
const START: &str = "<|startoftext|>";
const END: &str = "<|endoftext|>";

/// The folder's tokenizer, or `None` when it has no tokenizer files. Prompts are padded to
/// the longest of a batch, with `tokenizer_config.json`'s pad token (else the end token).
pub fn from_folder(dir: &Path, max_len: usize) -> Result<Option<PromptTokenizer>> {
    let json = dir.join("tokenizer.json");
    let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
    let tokenizer = if json.exists() {
        Tokenizer::load(&json)?
    } else if vocab.exists() && merges.exists() {
        from_vocab_and_merges(&vocab, &merges)?
    } else {
        return Ok(None);
    };
    let pad = config_token(&tokenizer_config(dir)?, "pad_token");
    let special = SpecialTokens {
        start: Some(START),
        end: END,
        pad: pad.as_deref(),
    };
    PromptTokenizer::new("CLIP", tokenizer, special, max_len, Padding::Longest).map(Some)
}

/// CLIP's tokenizer from `vocab.json` and `merges.txt`, as transformers assembles it.
fn from_vocab_and_merges(vocab: &Path, merges: &Path) -> Result<Tokenizer> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| Error::io(p, e));
    let vocab_json: Value = serde_json::from_str(&read(vocab)?)
        .map_err(|e| Error::format("vocab.json", format!("{}: {e}", vocab.display())))?;
    if !vocab_json.is_object() {
        return Err(Error::format(
            "vocab.json",
            format!("{}: expected an object of token ids", vocab.display()),
        ));
    }
    let merges_text = read(merges)?;
    let merges: Vec<&str> = merges_text
        .lines()
        .filter(|l| !l.starts_with("#version") && !l.trim().is_empty())
        .collect();
    let special = |token: &str| -> Result<Value> {
        let id = vocab_json
            .get(token)
            .and_then(Value::as_u64)
            .ok_or_else(|| {
                Error::format(
                    "vocab.json",
                    format!("{}: no `{token}` token", vocab.display()),
                )
            })?;
        Ok(
            json!({"id": id, "content": token, "single_word": false, "lstrip": false,
                  "rstrip": false, "normalized": false, "special": true}),
        )
    };
    let (start, end) = (special(START)?, special(END)?);
    let doc = json!({
        "version": "1.0",
        "added_tokens": [start.clone(), end.clone()],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFC"},
            {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
            {"type": "Lowercase"}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": WORD_PATTERN}, "behavior": "Removed",
             "invert": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
             "use_regex": true}]},
        "post_processor": {"type": "RobertaProcessing",
            "sep": [END, end["id"]], "cls": [START, start["id"]],
            "trim_offsets": false, "add_prefix_space": false},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                    "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": END,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "</w>",
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab_json, "merges": merges},
    });
    Tokenizer::from_json_value(&doc, &vocab.display().to_string())
}
