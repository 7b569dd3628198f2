//! The expected numbers come from scikit-learn 1.9.1, run on the same ids:
//!
//! ```python
//! from sklearn.metrics import *
//! y_true = [0, 1, 2, 2, 1, 0, 0, 2, 1, 1]
//! y_pred = [0, 2, 2, 2, 1, 0, 1, 3, 1, 0]
//! L = range(5)
//! accuracy_score(y_true, y_pred)
//! confusion_matrix(y_true, y_pred, labels=L)                       # and normalize="true"/"pred"/"all"
//! precision_recall_fscore_support(y_true, y_pred, labels=L, average=None, zero_division=0)
//! precision_recall_fscore_support(y_true, y_pred, labels=L, average="macro", zero_division=0)
//! precision_recall_fscore_support(y_true, y_pred, labels=L, average="weighted", zero_division=0)
//! ```
//!
//! Class 3 is predicted once but never true (precision 0 from a false positive, recall 0/0);
//! class 4 is in neither (all 0/0), and still counts in the macro means.

use super::*;
use crate::{DType, Tensor};

const TRUE: [i64; 10] = [0, 1, 2, 2, 1, 0, 0, 2, 1, 1];
const PRED: [i64; 10] = [0, 2, 2, 2, 1, 0, 1, 3, 1, 0];

fn ids(v: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

/// Scores [10, 5] whose argmax is PRED.
fn logits() -> Tensor {
    let mut v = vec![0.0f32; 50];
    for (i, &c) in PRED.iter().enumerate() {
        v[i * 5 + c as usize] = 2.0;
        v[i * 5 + (c as usize + 1) % 5] = 1.0;
    }
    Tensor::from_vec(v, &[10, 5]).unwrap()
}

fn close(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() < 1e-12, "{a:?} vs {b:?}");
    }
}

#[test]
fn accuracy_matches_scikit_learn_for_ids_and_for_logits() {
    assert_eq!(accuracy(&ids(&PRED), &ids(&TRUE)).unwrap(), 0.6);
    assert_eq!(accuracy(&logits(), &ids(&TRUE)).unwrap(), 0.6);
}

#[test]
fn accuracy_of_no_samples_is_nan() {
    assert!(accuracy(&ids(&[]), &ids(&[])).unwrap().is_nan());
}

#[test]
fn confusion_matrix_has_true_classes_as_rows_as_scikit_learn() {
    let cm = confusion_matrix(&ids(&PRED), &ids(&TRUE), Some(5)).unwrap();
    assert_eq!(cm.shape(), &[5, 5]);
    assert_eq!(cm.dtype(), DType::I64);
    #[rustfmt::skip]
    let expected = [
        2, 1, 0, 0, 0,
        1, 2, 1, 0, 0,
        0, 0, 2, 1, 0,
        0, 0, 0, 0, 0,
        0, 0, 0, 0, 0,
    ];
    assert_eq!(cm.to_vec::<i64>().unwrap(), expected);
}

#[test]
fn confusion_matrix_takes_the_class_count_from_logits_or_the_largest_id() {
    let from_logits = confusion_matrix(&logits(), &ids(&TRUE), None).unwrap();
    assert_eq!(from_logits.shape(), &[5, 5]);
    let from_ids = confusion_matrix(&ids(&PRED), &ids(&TRUE), None).unwrap();
    assert_eq!(from_ids.shape(), &[4, 4]);
}

#[test]
fn normalized_confusion_matches_scikit_learn_by_row_column_and_total() {
    let cm = confusion_matrix(&ids(&PRED), &ids(&TRUE), Some(5)).unwrap();
    let row = |how| {
        normalize_confusion(&cm, how)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
    };
    let t = 1.0 / 3.0;
    close(
        &row(Normalize::Rows)[..10],
        &[2.0 * t, t, 0.0, 0.0, 0.0, 0.25, 0.5, 0.25, 0.0, 0.0],
    );
    close(
        &row(Normalize::Columns)[10..15],
        &[0.0, 0.0, 2.0 * t, 1.0, 0.0],
    );
    close(&row(Normalize::All)[..5], &[0.2, 0.1, 0.0, 0.0, 0.0]);
    // Rows and columns without samples stay zero.
    assert!(row(Normalize::Rows)[15..].iter().all(|&v| v == 0.0));
}

#[test]
fn precision_recall_f1_match_scikit_learn_with_zero_division_zero() {
    let r = precision_recall_f1(&ids(&PRED), &ids(&TRUE), Some(5)).unwrap();
    let t = 2.0 / 3.0;
    close(&r.precision, &[t, t, t, 0.0, 0.0]);
    close(&r.recall, &[t, 0.5, t, 0.0, 0.0]);
    close(&r.f1, &[t, 0.5714285714285714, t, 0.0, 0.0]);
    assert_eq!(r.support, [3, 4, 3, 0, 0]);
    close(
        &[r.macro_precision, r.macro_recall, r.macro_f1],
        &[0.4, 0.3666666666666666, 0.38095238095238093],
    );
    close(
        &[r.weighted_precision, r.weighted_recall, r.weighted_f1],
        &[t, 0.6, 0.6285714285714286],
    );
}

#[test]
fn a_class_id_outside_the_class_count_is_an_error_naming_the_sample() {
    let err = confusion_matrix(&ids(&PRED), &ids(&TRUE), Some(3))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("confusion_matrix:"), "{err}");
    assert!(err.contains("prediction 7 is class 3"), "{err}");
}

#[test]
fn float_predictions_of_one_dim_are_an_error_suggesting_scores_or_a_cast() {
    let p = Tensor::from_vec(vec![0.0f32, 1.0], &[2]).unwrap();
    let err = accuracy(&p, &ids(&[0, 1])).unwrap_err().to_string();
    assert!(err.contains("accuracy") && err.contains("F32"), "{err}");
    assert!(err.contains("integer class ids"), "{err}");
}

#[test]
fn predictions_and_targets_of_different_lengths_are_an_error_with_both_counts() {
    let err = precision_recall_f1(&ids(&[0, 1, 1]), &ids(&[0, 1]), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("3 predictions for 2 targets"), "{err}");
}

#[test]
fn a_negative_target_is_an_error() {
    let err = accuracy(&ids(&[0, 1]), &ids(&[0, -1]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("target 1 is class -1, which is negative"),
        "{err}"
    );
}
