//! Computer-vision helpers around detection models: box arithmetic, non-maximum suppression
//! and detection metrics, following ultralytics' definitions so numbers can be compared.

pub mod boxes;
pub mod metrics;
pub mod nms;
pub mod report;
