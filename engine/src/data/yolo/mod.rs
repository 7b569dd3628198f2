//! ultralytics-format detection datasets: the dataset YAML, image and label files with
//! ultralytics' checks, a validation loader that decodes and letterboxes ahead of the consumer,
//! a training loader that augments ahead of it, and a generator of synthetic shape datasets.

pub mod config;
mod image_batches;
mod image_cache;
mod label_rows;
pub mod labels;
pub mod loader;
pub mod shapes;
pub mod train_loader;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod train_loader_tests;

pub use config::DataConfig;
pub use image_batches::{canvas_labels, ImageBatches};
pub use image_cache::load_train_image;
pub use labels::{ImageEntry, LabelCounts, YoloBox, YoloDataset};
pub use loader::{ValLoader, ValLoaderOptions, YoloBatch};
pub use shapes::{generate_shapes, ShapeKind, ShapesOptions};
pub use train_loader::{TrainBatch, TrainEpoch, TrainLoader, TrainLoaderOptions};
