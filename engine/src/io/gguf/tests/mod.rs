//! Tests of the GGUF reader on hand-built bytes (`builder`), of dequantization and the llama
//! mapping against files the `gguf` Python package wrote (`tests/fixtures/gguf/`), and of the
//! tokenizer built from metadata.

mod builder;
mod fixtures;
mod reader;
mod spm_tokenizer;
mod tokenizer;
mod writer;

use std::path::PathBuf;

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gguf")
        .join(name)
}
