//! T5's tokenizer from a checkpoint folder's `tokenizer.json` (a SentencePiece Unigram model;
//! its template appends `</s>`), padded as the diffusion pipelines pad it: every prompt to the
//! sequence length with `tokenizer_config.json`'s pad token (`<pad>`), cut keeping `</s>`.

use crate::models::prompt_tokenizer::{
    config_token, tokenizer_config, Padding, PromptTokenizer, SpecialTokens,
};
use crate::text::Tokenizer;
use crate::{Error, Result};
use std::path::Path;

pub fn from_folder(dir: &Path, max_len: usize) -> Result<PromptTokenizer> {
    let json = dir.join("tokenizer.json");
    if !json.exists() {
        return Err(Error::format(
            "T5 tokenizer",
            format!(
                "{}: no tokenizer.json (SentencePiece's spiece.model alone is not read; save the tokenizer with transformers' T5TokenizerFast)",
                dir.display()
            ),
        ));
    }
    let tokenizer = Tokenizer::load(&json)?;
    let config = tokenizer_config(dir)?;
    let end = config_token(&config, "eos_token").unwrap_or_else(|| "</s>".into());
    let pad = config_token(&config, "pad_token").unwrap_or_else(|| "<pad>".into());
    let special = SpecialTokens {
        start: None,
        end: &end,
        pad: Some(&pad),
    };
    PromptTokenizer::new("T5", tokenizer, special, max_len, Padding::MaxLength)
}
