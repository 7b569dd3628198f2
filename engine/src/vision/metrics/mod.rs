//! Detection metrics as ultralytics' detection validator computes them: per-image matching of
//! predictions to targets, AP per class, the P/R/mAP summary and fitness, and the confusion
//! matrix.

pub mod ap;
pub mod confusion;
pub mod curves;
pub mod det_metrics;
pub mod matching;
pub mod numeric;

pub use ap::{ap_per_class, ap_per_class_in_order, compute_ap, ApPerClass, DetectionStats};
pub use confusion::{ConfusionMatrix, DetectionsRef, CONFUSION_IOU};
pub use curves::CurveChart;
pub use det_metrics::{DetMetrics, ImageStats};
pub use matching::{
    iou_thresholds, match_predictions, target_boxes_on_canvas, true_positives, NIOU,
};
