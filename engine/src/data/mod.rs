//! Data: in-memory datasets from CSV, NPY and IDX files, splits, scaling and batching.
//! Every reader treats its bytes as untrusted: a corrupt file is an error, never a panic, and
//! nothing is allocated beyond what the file's size can justify.

pub mod batches;
pub mod csv;
pub mod dataset;
pub mod idx;
pub mod npy;
pub mod scaling;
pub mod spirals;
pub mod token_file;
mod untrusted;
pub mod yolo;

pub use batches::{Batches, DataLoader};
pub use csv::{CsvOptions, TargetKind};
pub use dataset::Dataset;
pub use scaling::{one_hot, Standardizer};
pub use token_file::{unigram_cross_entropy, TokenFile, TokenFileOptions, TokenSpan};
