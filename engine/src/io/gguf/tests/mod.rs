//! Tests of the GGUF reader on hand-built bytes (`builder`), of dequantization and the llama
//! mapping against files the `gguf` Python package wrote (`tests/fixtures/gguf/`). The tokenizer
//! built from metadata is tested in `text::gguf`.

pub(crate) mod builder;
mod fixtures;
mod reader;
mod writer;

use std::path::PathBuf;

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gguf")
        .join(name)
}
