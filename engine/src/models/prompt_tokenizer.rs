//! The text side of the image–text families (CLIP, SigLIP): a checkpoint's tokenizer with the
//! end token (and CLIP's start token) around each prompt, cut to the text tower's positions
//! with the end token kept, and batches padded as the family was trained: CLIP to the longest
//! prompt (it pools at the end token), SigLIP always to the full context (it pools at the last
//! position).

use crate::text::Tokenizer;
use crate::{Error, Result, Tensor};
use serde_json::Value;
use std::path::Path;

/// How a batch of prompts is padded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding {
    /// To the longest prompt of the batch.
    Longest,
    /// Every prompt to `max_len` (transformers' `padding="max_length"`).
    MaxLength,
}

pub struct PromptTokenizer {
    pub tokenizer: Tokenizer,
    start_id: Option<u32>,
    end_id: u32,
    pad_id: u32,
    /// The text tower's positions: longer prompts are cut, keeping their end token.
    pub max_len: usize,
    pub padding: Padding,
}

/// The tokens around a prompt, by name: `start` (if any), `end`, and `pad` (the end token when
/// `None`).
pub struct SpecialTokens<'a> {
    pub start: Option<&'a str>,
    pub end: &'a str,
    pub pad: Option<&'a str>,
}

impl PromptTokenizer {
    /// `family` names the tokenizer in errors.
    pub fn new(
        family: &str,
        tokenizer: Tokenizer,
        special: SpecialTokens,
        max_len: usize,
        padding: Padding,
    ) -> Result<PromptTokenizer> {
        let id = |token: &str| {
            tokenizer.token_to_id(token).ok_or_else(|| {
                Error::format(
                    "tokenizer",
                    format!("{family}: the vocabulary has no `{token}` token"),
                )
            })
        };
        let needed = 1 + usize::from(special.start.is_some());
        if max_len < needed {
            return Err(Error::invalid(
                "tokenizer",
                format!("{family}: the context of {max_len} cannot hold the {needed} tokens around a prompt"),
            ));
        }
        Ok(PromptTokenizer {
            start_id: special.start.map(id).transpose()?,
            end_id: id(special.end)?,
            pad_id: id(special.pad.unwrap_or(special.end))?,
            max_len,
            padding,
            tokenizer,
        })
    }

    /// One prompt's ids with its start and end tokens, cut to `max_len` (the end token kept).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_cut(text, self.max_len)
    }

    /// `encode`, cut to `max_len` instead of the tokenizer's own.
    fn encode_cut(&self, text: &str, max_len: usize) -> Result<Vec<u32>> {
        let mut ids = self.tokenizer.encode_with_template(text)?;
        if let Some(start) = self.start_id {
            if ids.first() != Some(&start) {
                ids.insert(0, start);
            }
        }
        if ids.last() != Some(&self.end_id) {
            ids.push(self.end_id);
        }
        if ids.len() > max_len {
            ids.truncate(max_len - 1);
            ids.push(self.end_id);
        }
        Ok(ids)
    }

    /// Prompts as ids [B, T] (I64), right-padded as `padding` says.
    pub fn encode_batch(&self, texts: &[&str]) -> Result<Tensor> {
        let t = match self.padding {
            Padding::Longest => None,
            Padding::MaxLength => Some(self.max_len),
        };
        self.batch(texts, t.unwrap_or(self.max_len), t)
    }

    /// Prompts as ids [B, len] (I64), each cut to and padded to `len` (T5's
    /// `max_sequence_length`, which a call may set).
    pub fn encode_batch_to(&self, texts: &[&str], len: usize) -> Result<Tensor> {
        let needed = 1 + usize::from(self.start_id.is_some());
        if len < needed {
            return Err(Error::invalid(
                "tokenizer",
                format!("a length of {len} cannot hold the {needed} tokens around a prompt"),
            ));
        }
        self.batch(texts, len, Some(len))
    }

    /// Rows cut to `cut`, padded to `pad` (the longest row where `None`).
    fn batch(&self, texts: &[&str], cut: usize, pad: Option<usize>) -> Result<Tensor> {
        if texts.is_empty() {
            return Err(Error::invalid("tokenizer", "no texts to encode"));
        }
        let rows = texts
            .iter()
            .map(|t| self.encode_cut(t, cut))
            .collect::<Result<Vec<_>>>()?;
        let t = pad.unwrap_or_else(|| rows.iter().map(Vec::len).max().unwrap_or(0));
        let mut flat = Vec::with_capacity(rows.len() * t);
        for row in &rows {
            flat.extend(row.iter().map(|&v| v as i64));
            flat.extend(std::iter::repeat_n(self.pad_id as i64, t - row.len()));
        }
        Tensor::from_vec(flat, &[rows.len(), t])
    }
}

/// The folder's `tokenizer_config.json`, or `Null` when it has none.
pub fn tokenizer_config(dir: &Path) -> Result<Value> {
    let path = dir.join("tokenizer_config.json");
    if !path.exists() {
        return Ok(Value::Null);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::format("tokenizer_config.json", format!("{}: {e}", path.display())))
}

/// A token named in `tokenizer_config.json` (a string, or an object with `content`).
pub fn config_token(config: &Value, key: &str) -> Option<String> {
    match config.get(key)? {
        Value::String(s) => Some(s.clone()),
        o => o.get("content").and_then(Value::as_str).map(str::to_string),
    }
}
