//! Per-class precision, recall and F1 with their support, and the macro and weighted averages,
//! as `sklearn.metrics.precision_recall_fscore_support` gives them with `labels=range(C)` and
//! `zero_division=0`: a class never predicted has precision 0, a class never present recall 0,
//! and a class in neither counts as 0 in the macro averages.

use super::{confusion::counts, ClassIds};
use crate::{Result, Tensor};

#[derive(Clone, Debug, PartialEq)]
pub struct PrecisionRecallF1 {
    /// Per class: true positives over predicted positives.
    pub precision: Vec<f64>,
    /// Per class: true positives over actual positives.
    pub recall: Vec<f64>,
    /// Per class: 2 tp / (2 tp + fp + fn), the harmonic mean of the two.
    pub f1: Vec<f64>,
    /// Per class: how many samples truly are of it.
    pub support: Vec<u64>,
    /// Unweighted means over the classes (`average="macro"`).
    pub macro_precision: f64,
    pub macro_recall: f64,
    pub macro_f1: f64,
    /// Means weighted by support (`average="weighted"`).
    pub weighted_precision: f64,
    pub weighted_recall: f64,
    pub weighted_f1: f64,
}

/// Precision, recall and F1 of each of the classes and their averages. `pred` is class ids
/// `[N]` or scores `[N, C]`, `target` class ids `[N]`; `num_classes` defaults to C for scores,
/// else to the largest id plus one.
pub fn precision_recall_f1(
    pred: &Tensor,
    target: &Tensor,
    num_classes: Option<usize>,
) -> Result<PrecisionRecallF1> {
    let ids = ClassIds::read("precision_recall_f1", pred, target, num_classes)?;
    let m = counts("precision_recall_f1", &ids)?;
    Ok(PrecisionRecallF1::from_confusion(&m))
}

impl PrecisionRecallF1 {
    /// From confusion counts `[true][predicted]`.
    pub fn from_confusion(m: &[Vec<u64>]) -> PrecisionRecallF1 {
        let c = m.len();
        let ratio = |num: u64, den: u64| {
            if den > 0 {
                num as f64 / den as f64
            } else {
                0.0
            }
        };
        let (mut precision, mut recall, mut f1, mut support) =
            (vec![0.0; c], vec![0.0; c], vec![0.0; c], vec![0u64; c]);
        for k in 0..c {
            let tp = m[k][k];
            let actual: u64 = m[k].iter().sum();
            let predicted: u64 = m.iter().map(|row| row[k]).sum();
            precision[k] = ratio(tp, predicted);
            recall[k] = ratio(tp, actual);
            // 2tp + fp + fn = predicted + actual.
            f1[k] = ratio(2 * tp, predicted + actual);
            support[k] = actual;
        }
        let total: u64 = support.iter().sum();
        let mean = |v: &[f64]| {
            if c == 0 {
                0.0
            } else {
                v.iter().sum::<f64>() / c as f64
            }
        };
        let weighted = |v: &[f64]| {
            if total == 0 {
                0.0
            } else {
                v.iter()
                    .zip(&support)
                    .map(|(x, &s)| x * s as f64)
                    .sum::<f64>()
                    / total as f64
            }
        };
        PrecisionRecallF1 {
            macro_precision: mean(&precision),
            macro_recall: mean(&recall),
            macro_f1: mean(&f1),
            weighted_precision: weighted(&precision),
            weighted_recall: weighted(&recall),
            weighted_f1: weighted(&f1),
            precision,
            recall,
            f1,
            support,
        }
    }
}
