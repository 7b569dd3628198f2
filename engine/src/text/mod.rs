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
pub mod chat_template;
pub mod chunks;
mod decode;
pub mod files;
pub mod gguf;
mod glob;
mod hf_json;
pub mod jsonl;
mod limits;
mod model;
mod normalize;
mod pattern;
pub mod pretokenize;
mod sentencepiece;
pub mod spiece_model;
mod spm;
mod symbols;
mod tokenizer;
mod train;
mod unigram;
mod wordpiece;

#[cfg(test)]
mod tests;

pub use added::AddedToken;
pub use decode::{StopPiece, StopStrings, StreamDecoder};
pub use files::{collect, collect_files, looks_like_text, FileFilter};
pub use pattern::{Pattern, PatternSource};
pub use pretokenize::{SplitPattern, GPT2_PATTERN, LLAMA3_PATTERN};
pub use sentencepiece::SentencePieceOptions;
pub use spm::{SpmModel, SpmVocabError};
pub use tokenizer::{Template, Tokenizer};
pub use train::{train_bpe, train_bpe_files, TrainOptions};

pub(crate) use crate::io::temp_file::write_atomically;
