//! Predictions and targets read as class ids on the host, checked against each other: the
//! common first step of every classification metric.

use crate::{bail, Error, Result, Tensor};

/// Predicted and true class ids of the same N samples, and the number of classes.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassIds {
    pub predicted: Vec<usize>,
    pub actual: Vec<usize>,
    pub num_classes: usize,
}

impl ClassIds {
    /// `pred` is class ids `[N]` (an integer tensor) or scores `[N, C]` (argmax over C);
    /// `target` is class ids `[N]`. `num_classes` defaults to C for scores, else to the largest
    /// id plus one; an id outside `0..num_classes` is an error naming which tensor, the
    /// sample and the id.
    pub fn read(
        op: &'static str,
        pred: &Tensor,
        target: &Tensor,
        num_classes: Option<usize>,
    ) -> Result<ClassIds> {
        let (predicted, scored_classes) = match pred.rank() {
            2 => (
                ids(op, "prediction", &pred.detach().argmax(Some(-1), false)?)?,
                Some(pred.shape()[1]),
            ),
            1 => (ids(op, "prediction", pred)?, None),
            _ => bail!(
                op,
                "predictions must be class ids [N] or scores [N, classes], got shape {:?}",
                pred.shape()
            ),
        };
        if target.rank() != 1 {
            bail!(
                op,
                "targets must be class ids [N], got shape {:?}",
                target.shape()
            );
        }
        let actual = ids(op, "target", target)?;
        if predicted.len() != actual.len() {
            bail!(
                op,
                "{} predictions for {} targets",
                predicted.len(),
                actual.len()
            );
        }
        let largest = predicted.iter().chain(&actual).max().map_or(0, |&m| m + 1);
        let num_classes = num_classes.or(scored_classes).unwrap_or(largest);
        for (what, values) in [("prediction", &predicted), ("target", &actual)] {
            if let Some((i, c)) = values.iter().enumerate().find(|(_, &c)| c >= num_classes) {
                bail!(
                    op,
                    "{what} {i} is class {c}, outside the {num_classes} classes 0..{num_classes}"
                );
            }
        }
        Ok(ClassIds {
            predicted,
            actual,
            num_classes,
        })
    }

    pub fn len(&self) -> usize {
        self.actual.len()
    }

    pub fn is_empty(&self) -> bool {
        self.actual.is_empty()
    }
}

/// The non-negative integer ids of a 1-D tensor; `what` names it in errors.
fn ids(op: &'static str, what: &str, t: &Tensor) -> Result<Vec<usize>> {
    if !t.dtype().is_int() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: t.dtype(),
            detail: format!(
                ": {what}s [N] must be integer class ids (pass scores [N, classes] to take their argmax, or cast with .to(\"i64\"))"
            ),
        });
    }
    t.to_vec::<i64>()?
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            usize::try_from(c).map_err(|_| {
                Error::invalid(op, format!("{what} {i} is class {c}, which is negative"))
            })
        })
        .collect()
}
