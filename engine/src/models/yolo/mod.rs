//! The YOLO detection family (YOLOv8 and YOLO11): the network built from ultralytics' model
//! YAML with ultralytics' parameter names, its blocks and detection head, and its training
//! loss.

mod block;
mod blocks;
mod build;
pub mod config;
mod conv;
pub mod definitions;
mod head;
mod init;
mod load;
pub mod loss;
mod network;
mod onnx;
mod onnx_check;
pub mod predict;
pub mod saved;
#[cfg(test)]
mod tests;
pub mod train;
mod ultralytics_pt;
pub mod val;
mod weights;

pub use build::SUPPORTED;
pub use config::YoloConfig;
pub use head::{Detect, HeadOutput};
pub use network::YoloModel;
pub use ultralytics_pt::{PtMeta, ULTRALYTICS_VERSION};
pub use weights::fold_batch_norms;
