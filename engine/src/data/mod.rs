//! Data: in-memory datasets from CSV, NPY and IDX files, splits, scaling and batching.
//! Every reader treats its bytes as untrusted: a corrupt file is an error, never a panic, and
//! nothing is allocated beyond what the file's size can justify.

pub mod background;
pub mod batch_source;
pub mod batches;
pub mod captioned_images;
pub mod csv;
pub mod dataset;
mod describe;
pub mod idx;
pub mod image_folder;
pub mod mix;
pub mod ordered_pool;
pub mod scaling;
pub mod spirals;
pub mod token_file;
pub mod yolo;

// NPY is a file format (io reads it for checkpoints too); datasets read it from there.
pub use crate::io::npy;
pub(crate) use crate::io::{in_file, untrusted};
pub use batch_source::{Batch, BatchSource, Epoch};
pub use batches::{Batches, DataLoader};
pub use csv::{CsvOptions, TargetKind};
pub use dataset::Dataset;
pub use image_folder::{
    ImageFolder, ImageFolderBatches, ImageFolderOptions, ImageTransform, TrainAugment,
};

impl Dataset {
    /// Features `[N, ...]` (flattened to `[N, F]`) and targets `[N]` from two `.npy` files;
    /// integer targets are class ids, float targets regression values.
    pub fn from_npy(
        features: impl AsRef<std::path::Path>,
        targets: impl AsRef<std::path::Path>,
    ) -> crate::Result<Dataset> {
        Dataset::flattened(npy::read_npy(features)?, npy::read_npy(targets)?)
    }
}
pub use scaling::{one_hot, Standardizer};
pub use token_file::{unigram_cross_entropy, Shard, TokenFile, TokenFileOptions, TokenSpan};
