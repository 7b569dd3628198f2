//! Weight formats: safetensors read and write; PyTorch `.pt`, ONNX and GGUF models read.

pub mod any;
pub mod base64;
pub mod gguf;
pub mod onnx;
pub mod safetensors;
pub mod temp_file;
pub mod torch;
pub mod yaml;

pub use self::safetensors::{
    load, load_bytes, load_bytes_with_metadata, load_with_metadata, save, save_bytes, Loaded,
    NamedTensors,
};
