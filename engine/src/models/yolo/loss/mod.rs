//! Training loss of the YOLO detectors, as ultralytics 8.4.190's `v8DetectionLoss`: labels
//! padded per image (`targets`), the task-aligned assigner (`assigner`), CIoU (`iou`), the
//! distribution focal loss (`dfl`) and the loss that puts them together (`loss`).
//!
//! ```text
//! maps (per level [B, 4*reg_max + nc, H, W]) + DetectionTargets
//!   -> decode boxes (DFL expectation), assign anchors (no gradient)
//!   -> box (1 - CIoU), cls (BCE), dfl terms, gains 7.5 / 0.5 / 1.5, times batch size
//! ```

mod assigner;
mod dfl;
mod iou;
#[allow(clippy::module_inception)]
mod loss;
mod targets;

pub use assigner::{top_k_mask, Assignment, TaskAlignedAssigner};
pub use dfl::dfl_loss;
pub use iou::{bbox_ciou, CIOU_EPS};
pub use loss::{DetectionLoss, LossGains, LossOutput};
pub use targets::{DetectionTargets, TargetBox};
