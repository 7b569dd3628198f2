//! CLIP's tokenizer from a checkpoint folder: `tokenizer.json` where it has one, else the
//! older `vocab.json` + `merges.txt` pair, read with the pipeline transformers builds for CLIP
//! (NFC, whitespace runs to one space, lower-casing; CLIP's word pattern; byte-level BPE with
//! `</w>` closing each word; `<|startoftext|>` … `<|endoftext|>` around every text). Batches
//! come out right-padded with the folder's pad token and cut to the model's context.

use crate::text::Tokenizer;
use crate::{Error, Result, Tensor};
use serde_json::{json, Value};
use std::path::Path;

/// CLIP's word pattern: its special tokens, English contractions, letter runs, single digits,
/// and runs of anything else that is not space.
const WORD_PATTERN: &str =
    r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+";
const START: &str = "<|startoftext|>";
const END: &str = "<|endoftext|>";

pub struct ClipTokenizer {
    pub tokenizer: Tokenizer,
    start_id: u32,
    end_id: u32,
    pad_id: u32,
    /// The text tower's positions: longer texts are cut, keeping their end token.
    pub max_len: usize,
}

impl ClipTokenizer {
    /// The folder's tokenizer, or `None` when it has no tokenizer files.
    pub fn from_folder(dir: &Path, max_len: usize) -> Result<Option<ClipTokenizer>> {
        let json = dir.join("tokenizer.json");
        let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
        let tokenizer = if json.exists() {
            Tokenizer::load(&json)?
        } else if vocab.exists() && merges.exists() {
            from_vocab_and_merges(&vocab, &merges)?
        } else {
            return Ok(None);
        };
        let pad = pad_token(dir)?;
        ClipTokenizer::new(tokenizer, pad.as_deref(), max_len).map(Some)
    }

    /// `pad` names the pad token (the end token when `None`).
    pub fn new(tokenizer: Tokenizer, pad: Option<&str>, max_len: usize) -> Result<ClipTokenizer> {
        let id = |token: &str| {
            tokenizer.token_to_id(token).ok_or_else(|| {
                Error::format(
                    "CLIP tokenizer",
                    format!("the vocabulary has no `{token}` token"),
                )
            })
        };
        if max_len < 2 {
            return Err(Error::invalid(
                "CLIP tokenizer",
                "the context must hold at least the start and end tokens",
            ));
        }
        Ok(ClipTokenizer {
            start_id: id(START)?,
            end_id: id(END)?,
            pad_id: id(pad.unwrap_or(END))?,
            max_len,
            tokenizer,
        })
    }

    /// One text's ids with the start and end tokens, cut to `max_len` (the end token kept).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = self.tokenizer.encode_with_template(text)?;
        if ids.first() != Some(&self.start_id) {
            ids.insert(0, self.start_id);
        }
        if ids.last() != Some(&self.end_id) {
            ids.push(self.end_id);
        }
        if ids.len() > self.max_len {
            ids.truncate(self.max_len - 1);
            ids.push(self.end_id);
        }
        Ok(ids)
    }

    /// Texts as ids [B, T] (I64), right-padded to the longest.
    pub fn encode_batch(&self, texts: &[&str]) -> Result<Tensor> {
        if texts.is_empty() {
            return Err(Error::invalid("CLIP tokenizer", "no texts to encode"));
        }
        let rows = texts
            .iter()
            .map(|t| self.encode(t))
            .collect::<Result<Vec<_>>>()?;
        let t = rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut flat = Vec::with_capacity(rows.len() * t);
        for row in &rows {
            flat.extend(row.iter().map(|&v| v as i64));
            flat.extend(std::iter::repeat_n(self.pad_id as i64, t - row.len()));
        }
        Tensor::from_vec(flat, &[rows.len(), t])
    }
}

/// `tokenizer_config.json`'s `pad_token` (a string, or an object with `content`), if any.
fn pad_token(dir: &Path) -> Result<Option<String>> {
    let path = dir.join("tokenizer_config.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| Error::format("tokenizer_config.json", format!("{}: {e}", path.display())))?;
    Ok(match v.get("pad_token") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        None => None,
    })
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
