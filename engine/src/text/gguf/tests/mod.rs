//! The tokenizer built from GGUF metadata, on hand-built files (`io::gguf`'s test builder) and
//! the fixtures the `gguf` Python package wrote.

mod spm_tokenizer;
mod tokenizer;
