//! Weight and array formats: safetensors read and write; PyTorch `.pt`, ONNX, GGUF and NPY
//! read (any checkpoint by its content: `any`).

pub mod any;
pub mod base64;
pub mod clock;
pub mod gguf;
pub mod inspect;
pub mod npy;
pub mod onnx;
pub mod pretrained;
pub mod safetensors;
pub mod temp_file;
pub mod torch;
pub(crate) mod untrusted;
pub mod yaml;

pub use self::safetensors::{
    load, load_bytes, load_bytes_with_metadata, load_with_metadata, save, save_bytes, Loaded,
    NamedTensors,
};

/// Names the file in a reader's error (`csv: data/iris.csv: row 3 ...`): the parsers work on
/// bytes and cannot know it. Io errors already carry their path; others pass through.
pub(crate) fn in_file(path: &std::path::Path, e: crate::Error) -> crate::Error {
    use crate::Error;
    match e {
        Error::Format { format, msg } => Error::Format {
            format,
            msg: format!("{}: {msg}", path.display()),
        },
        Error::InvalidArgument { op, msg } => Error::InvalidArgument {
            op,
            msg: format!("{}: {msg}", path.display()),
        },
        other => other,
    }
}
