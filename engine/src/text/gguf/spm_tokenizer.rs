//! The `llama` tokenizer model, llama.cpp's SentencePiece: the tokens with a score each
//! (`tokenizer.ggml.scores`, f32, or i32 as llama.cpp also reads them; all 0 when absent, as
//! there) and `tokenizer.ggml.add_space_prefix` (true when absent), built as
//! `Tokenizer::sentencepiece`. There are no merges: the scores decide what merges.

use super::tokenizer::key_error;
use crate::io::gguf::metadata::{Array, Metadata};
use crate::text::{AddedToken, SentencePieceOptions, SpmModel, SpmVocabError, Template, Tokenizer};
use crate::Result;

const SCORES: &str = "tokenizer.ggml.scores";
const TOKENS: &str = "tokenizer.ggml.tokens";

/// The tokenizer of a `llama` file's vocabulary `tokens`, with the tokens cut out whole
/// (`added`) and BOS/EOS (`template`) already read.
pub(super) fn spm_tokenizer(
    meta: &Metadata,
    tokens: &[String],
    added: Vec<AddedToken>,
    template: Template,
) -> Result<Tokenizer> {
    let file = &meta.file;
    let scores = scores(meta, tokens.len())?;
    // llama.cpp names an empty token by its id, so it cannot clash with another.
    let tokens: Vec<String> = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| match t.is_empty() {
            true => format!("[EMPTY_{id}]"),
            false => t.clone(),
        })
        .collect();
    let model = SpmModel::new(tokens, scores).map_err(|e| {
        let key = match e {
            SpmVocabError::ScoreCount { .. } | SpmVocabError::NanScore { .. } => SCORES,
            SpmVocabError::RepeatedToken { .. } | SpmVocabError::TooManyTokens(_) => TOKENS,
        };
        key_error(file, key, e)
    })?;
    let options = SentencePieceOptions {
        add_space_prefix: meta
            .opt_bool("tokenizer.ggml.add_space_prefix")?
            .unwrap_or(true),
        template,
    };
    let model = model.named(format!("{TOKENS} of {file}"));
    Tokenizer::sentencepiece(model, added, options)
}

/// One score per token, none NaN.
fn scores(meta: &Metadata, count: usize) -> Result<Vec<f32>> {
    let file = &meta.file;
    let Some(value) = meta.get(SCORES) else {
        return Ok(vec![0.0; count]);
    };
    let scores: Vec<f32> = match value.as_array() {
        Some(Array::F32(v)) => v.clone(),
        Some(Array::I32(v)) => v.iter().map(|&x| x as f32).collect(),
        _ => {
            return Err(key_error(
                file,
                SCORES,
                format!(
                    "expected an array of f32 (or i32), found {}",
                    value.type_name()
                ),
            ))
        }
    };
    if scores.len() != count {
        return Err(key_error(
            file,
            SCORES,
            format!("has {} scores for {count} tokens", scores.len()),
        ));
    }
    if let Some(id) = scores.iter().position(|s| s.is_nan()) {
        return Err(key_error(
            file,
            SCORES,
            format!("the score of token {id} is NaN"),
        ));
    }
    Ok(scores)
}
