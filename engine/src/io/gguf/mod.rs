//! GGUF, llama.cpp's model file: the reader (`GgufFile`: header, metadata, tensor infos, each
//! tensor's data on demand), dequantization of ggml's block formats to f32 (`quants`), the
//! tokenizer a file carries (`tokenizer`: byte-level BPE or SentencePiece), and the `llama`
//! architecture in Hugging Face's names (`llama`). `models::transformer_lm::load_gguf` puts
//! them together.
//!
//! The other way: `GgufWriter` writes a file (version 3, any metadata, tensors in F32, F16,
//! BF16 or quantized by `quantize` to Q8_0, Q4_0, Q5_0 and Q4_K as ggml's reference quantizers
//! do); `models::transformer_lm::export_gguf` writes a model with it.
//!
//! Files are untrusted: a truncated or corrupt file, an unknown value or tensor type, or a size
//! that the file's length cannot hold is an error naming the file and the key or tensor.

mod cursor;
pub mod ggml_type;
mod gpt2_tokenizer;
pub mod llama;
pub mod metadata;
pub mod quantize;
pub mod quants;
mod read_metadata;
mod reader;
mod spm_tokenizer;
#[cfg(test)]
mod tests;
mod token_types;
pub mod tokenizer;
pub mod write_tokenizer;
mod writer;

pub use ggml_type::GgmlType;
pub use metadata::{Array, Metadata, Value, ValueType};
pub use reader::{GgufFile, TensorInfo};
pub use tokenizer::{read_tokenizer, GgufTokenizer};
pub use writer::GgufWriter;

use crate::Error;

const FORMAT: &str = "GGUF";

/// An error about the file `file`.
fn format_error(file: &str, msg: impl std::fmt::Display) -> Error {
    Error::format(FORMAT, format!("{file}: {msg}"))
}
