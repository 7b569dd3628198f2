//! Weight formats: safetensors read and write.

pub mod safetensors;

pub use self::safetensors::{
    load, load_bytes, load_bytes_with_metadata, load_with_metadata, save, save_bytes, Loaded,
    NamedTensors,
};
