//! Text: BPE tokenizers that read and write Hugging Face `tokenizer.json`, a trainer, and
//! streaming decode for generation. Byte-level files (GPT-2, LLaMA-3, Qwen, DeepSeek) and
//! SentencePiece-style ones with byte fallback (LLaMA-2, Mistral, Gemma) load, with their
//! normalizers (`normalize`), pre-tokenizers (`pretokenize`), added and special tokens
//! (`added`), model (`bpe`, `symbols`) and decoders (`decode`). The model may instead be a
//! SentencePiece vocabulary with scores, merged as llama.cpp does (`spm`, assembled by
//! `sentencepiece`), for GGUF files whose tokenizer model is `llama`.
//!
//! - `Tokenizer::load(path)` / `save(path)`: the Hugging Face file format.
//! - `encode(text)` / `decode(ids, skip_special)`: ids are `u32`.
//! - `train_bpe(texts, options)` / `train_bpe_files(paths, options)`: learns merges with
//!   Hugging Face's `BpeTrainer` rules, so the same text gives the same vocabulary.

mod added;
mod bpe;
pub mod byte_level;
pub mod chunks;
mod decode;
pub mod files;
mod glob;
mod hf_json;
pub mod jsonl;
mod model;
mod normalize;
mod pattern;
pub mod pretokenize;
mod sentencepiece;
mod spm;
mod symbols;
mod tokenizer;
mod train;

#[cfg(test)]
mod tests;

pub use added::AddedToken;
pub use decode::StreamDecoder;
pub use files::{collect, collect_files, looks_like_text, FileFilter};
pub use pattern::{Pattern, PatternSource};
pub use pretokenize::{SplitPattern, GPT2_PATTERN, LLAMA3_PATTERN};
pub use sentencepiece::SentencePieceOptions;
pub use spm::{SpmModel, SpmVocabError};
pub use tokenizer::{Template, Tokenizer};
pub use train::{train_bpe, train_bpe_files, TrainOptions};

use crate::{Error, Result};
use std::path::Path;

/// Writes `bytes` to a temporary file beside `path` and renames it over `path`, so a reader
/// never sees a half-written file and a crash leaves the old one intact.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    create_parent(path)?;
    let tmp = crate::io::temp_file::TempFile::beside(path);
    std::fs::write(tmp.path(), bytes).map_err(|e| Error::io(tmp.path(), e))?;
    tmp.persist(path)
}

/// Makes the folder `path` goes in, so `out/tokenizer.json` works on a fresh checkout.
pub(crate) fn create_parent(path: &Path) -> Result<()> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e)),
        None => Ok(()),
    }
}
