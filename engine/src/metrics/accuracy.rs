//! Accuracy: the fraction of samples whose predicted class is the true one.

use super::ClassIds;
use crate::{Result, Tensor};

/// The fraction of correct predictions (`sklearn.metrics.accuracy_score`). `pred` is class ids
/// `[N]` or scores `[N, C]`; `target` class ids `[N]`. NaN for no samples, as a mean of
/// nothing is.
pub fn accuracy(pred: &Tensor, target: &Tensor) -> Result<f64> {
    // Any id is fine here: accuracy needs no class count.
    let ids = ClassIds::read("accuracy", pred, target, Some(usize::MAX))?;
    let correct = ids
        .predicted
        .iter()
        .zip(&ids.actual)
        .filter(|(p, a)| p == a)
        .count();
    Ok(correct as f64 / ids.len() as f64)
}
