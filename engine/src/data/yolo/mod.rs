//! ultralytics-format detection datasets: the dataset YAML, image and label files with
//! ultralytics' checks, a validation loader that decodes and letterboxes ahead of the consumer,
//! and a generator of synthetic shape datasets.

pub mod config;
pub mod labels;

#[cfg(test)]
mod tests;

pub use config::DataConfig;
pub use labels::{ImageEntry, LabelCounts, YoloBox, YoloDataset};
