//! The confusion matrix as `sklearn.metrics.confusion_matrix` lays it out (row i: samples whose
//! true class is i; column j: samples predicted as j), and its normalizations.

use super::ClassIds;
use crate::tensor::memory::check_alloc;
use crate::{bail, DType, Device, Result, Tensor};

/// Which sums a normalized confusion matrix divides by (scikit-learn's `normalize=`). A zero
/// sum leaves zeros, as scikit-learn's does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Normalize {
    /// Each row (true class) sums to 1: recall on the diagonal (`normalize="true"`).
    Rows,
    /// Each column (predicted class) sums to 1: precision on the diagonal (`"pred"`).
    Columns,
    /// The whole matrix sums to 1 (`"all"`).
    All,
}

/// Counts `[C, C]` (I64, on the CPU): entry `[i, j]` is how many samples of true class `i`
/// were predicted as `j`. `pred` is class ids `[N]` or scores `[N, C]`, `target` class ids
/// `[N]`; `num_classes` defaults to C for scores, else to the largest id plus one.
pub fn confusion_matrix(
    pred: &Tensor,
    target: &Tensor,
    num_classes: Option<usize>,
) -> Result<Tensor> {
    let ids = ClassIds::read("confusion_matrix", pred, target, num_classes)?;
    let c = ids.num_classes;
    let counts = counts("confusion_matrix", &ids)?;
    let flat: Vec<i64> = counts.into_iter().flatten().map(|n| n as i64).collect();
    Tensor::from_vec(flat, &[c, c])
}

/// The counts as rows, after checking that `[C, C]` fits in memory (C can come from the data).
pub(super) fn counts(op: &'static str, ids: &ClassIds) -> Result<Vec<Vec<u64>>> {
    let c = ids.num_classes;
    check_alloc(op, &[c, c], DType::I64, Device::Cpu)?;
    let mut m = vec![vec![0u64; c]; c];
    for (&p, &a) in ids.predicted.iter().zip(&ids.actual) {
        m[a][p] += 1;
    }
    Ok(m)
}

/// A square confusion matrix `[C, C]` (any dtype) divided by its row, column or total sums,
/// as F64.
pub fn normalize_confusion(cm: &Tensor, how: Normalize) -> Result<Tensor> {
    let shape = cm.shape();
    if shape.len() != 2 || shape[0] != shape[1] {
        bail!(
            "normalize_confusion",
            "needs a square matrix [classes, classes], got shape {shape:?}"
        );
    }
    let c = shape[0];
    let values = cm.to_vec_f64()?;
    let rows: Vec<Vec<f64>> = values.chunks(c.max(1)).map(<[f64]>::to_vec).collect();
    let flat: Vec<f64> = normalize_matrix(&rows, how).into_iter().flatten().collect();
    Tensor::from_vec(flat, &[c, c])
}

/// `m` (rows of one length) divided by its row, column or total sums; a zero sum gives zeros.
pub fn normalize_matrix(m: &[Vec<f64>], how: Normalize) -> Vec<Vec<f64>> {
    let cols = m.first().map_or(0, Vec::len);
    let row_sums: Vec<f64> = m.iter().map(|r| r.iter().sum()).collect();
    let column_sums: Vec<f64> = (0..cols)
        .map(|j| m.iter().map(|r| r.get(j).copied().unwrap_or(0.0)).sum())
        .collect();
    let total: f64 = row_sums.iter().sum();
    let ratio = |v: f64, s: f64| if s != 0.0 { v / s } else { 0.0 };
    m.iter()
        .enumerate()
        .map(|(i, r)| {
            r.iter()
                .enumerate()
                .map(|(j, &v)| match how {
                    Normalize::Rows => ratio(v, row_sums[i]),
                    Normalize::Columns => ratio(v, column_sums[j]),
                    Normalize::All => ratio(v, total),
                })
                .collect()
        })
        .collect()
}
