//! The tokenizer a GGUF file carries, read from its metadata (`read_tokenizer`: byte-level BPE
//! as llama.cpp's `gpt2` model, or SentencePiece as its `llama` model) and written into it
//! (`write_tokenizer`), on top of the file format in `io::gguf`.

mod gpt2_tokenizer;
mod spm_tokenizer;
#[cfg(test)]
mod tests;
mod token_types;
pub mod tokenizer;
pub mod write_tokenizer;

pub use tokenizer::{load_tokenizer, read_tokenizer, GgufTokenizer};
