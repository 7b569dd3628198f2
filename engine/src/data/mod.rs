//! Data: in-memory datasets from CSV, NPY and IDX files, splits, scaling and batching.
//! Every reader treats its bytes as untrusted: a corrupt file is an error, never a panic, and
//! nothing is allocated beyond what the file's size can justify.

pub mod background;
pub mod batch_source;
pub mod batches;
pub mod csv;
pub mod dataset;
mod describe;
pub mod idx;
pub mod npy;
pub mod ordered_pool;
pub mod scaling;
pub mod spirals;
pub mod token_file;
mod untrusted;
pub mod yolo;

use crate::Error;
use std::path::Path;

/// Names the file in a reader's error (`csv: data/iris.csv: row 3 ...`): the parsers work on
/// bytes and cannot know it. Io errors already carry their path; others pass through.
pub(crate) fn in_file(path: &Path, e: Error) -> Error {
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

pub use batch_source::{Batch, BatchSource, Epoch};
pub use batches::{Batches, DataLoader};
pub use csv::{CsvOptions, TargetKind};
pub use dataset::Dataset;
pub use scaling::{one_hot, Standardizer};
pub use token_file::{unigram_cross_entropy, Shard, TokenFile, TokenFileOptions, TokenSpan};
