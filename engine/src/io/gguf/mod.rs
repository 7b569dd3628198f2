//! GGUF, llama.cpp's model file: the reader (`GgufFile`: header, metadata, tensor infos, each
//! tensor's data on demand), dequantization of ggml's block formats to f32 (`quants`), and the
//! `llama` architecture in Hugging Face's names (`llama`). The tokenizer a file carries is
//! read and written by `text::gguf`, above this module; `models::transformer_lm::load_gguf`
//! puts them together.
//!
//! The other way: `GgufWriter` writes a file (version 3, any metadata, tensors in F32, F16,
//! BF16 or quantized by `quantize` to Q8_0, Q4_0, Q5_0 and Q4_K as ggml's reference quantizers
//! do); `models::transformer_lm::export_gguf` writes a model with it.
//!
//! Files are untrusted: a truncated or corrupt file, an unknown value or tensor type, or a size
//! that the file's length cannot hold is an error naming the file and the key or tensor.

mod arch;
mod cursor;
pub mod llama;
pub mod metadata;
mod read_metadata;
mod reader;
#[cfg(test)]
pub(crate) mod tests;
mod writer;

// The block formats and their host arithmetic are the backend's (ops quantize with them too);
// the reader and the writer name them here as they always have.
pub use crate::backend::cpu::ggml::{quantize, quants};
pub use crate::backend::spec::ggml as ggml_type;

pub use ggml_type::GgmlType;
pub use metadata::{Array, Metadata, Value, ValueType};
pub use reader::{GgufFile, TensorInfo};
pub use writer::GgufWriter;

use crate::Error;

const FORMAT: &str = "GGUF";

/// An error about the file `file`.
pub(crate) fn format_error(file: &str, msg: impl std::fmt::Display) -> Error {
    Error::format(FORMAT, format!("{file}: {msg}"))
}
