//! Classification metrics as scikit-learn computes them: accuracy, the confusion matrix (rows
//! the true class, columns the predicted one) and per-class precision, recall and F1 with their
//! macro and weighted averages, where a ratio over nothing is 0 (scikit-learn's
//! `zero_division` default). Predictions are class ids `[N]` or scores `[N, C]` (logits or
//! probabilities, reduced by argmax).
//!
//! Detection metrics (AP, mAP, the detector's confusion matrix with its background class) are
//! a different computation and live in `vision::metrics`.

mod accuracy;
mod class_ids;
mod confusion;
mod precision_recall;

pub use accuracy::accuracy;
pub use class_ids::ClassIds;
pub use confusion::{confusion_matrix, normalize_confusion, normalize_matrix, Normalize};
pub use precision_recall::{precision_recall_f1, PrecisionRecallF1};

#[cfg(test)]
mod tests;
