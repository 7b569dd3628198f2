//! Losses, composed from differentiable ops so their gradients come from autograd.

use crate::{DType, Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    #[default]
    Mean,
    Sum,
    None,
}

impl Reduction {
    pub fn parse(name: &str) -> Option<Reduction> {
        match name {
            "mean" => Some(Reduction::Mean),
            "sum" => Some(Reduction::Sum),
            "none" => Some(Reduction::None),
            _ => None,
        }
    }

    fn apply(self, per_item: Tensor) -> Result<Tensor> {
        match self {
            Reduction::Mean => per_item.mean(),
            Reduction::Sum => per_item.sum(),
            Reduction::None => Ok(per_item),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyOptions {
    /// Targets equal to this are skipped and do not count toward the mean.
    pub ignore_index: Option<i64>,
    pub label_smoothing: f64,
    pub reduction: Reduction,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        CrossEntropyOptions {
            ignore_index: Some(-100),
            label_smoothing: 0.0,
            reduction: Reduction::Mean,
        }
    }
}

fn check_same_shape(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.shape() != b.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        });
    }
    Ok(())
}

/// Logits [N, C] (or [N, C, d..] with the class dim second, or [C]) against integer class
/// targets [N] (or [N, d..], or a scalar), as torch.nn.functional.cross_entropy.
pub fn cross_entropy(
    logits: &Tensor,
    targets: &Tensor,
    opts: CrossEntropyOptions,
) -> Result<Tensor> {
    logits.check_float("cross_entropy")?;
    if targets.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op: "cross_entropy",
            dtype: targets.dtype(),
            detail: ": targets must be integer class indices".into(),
        });
    }
    if !(0.0..=1.0).contains(&opts.label_smoothing) {
        return Err(Error::invalid(
            "cross_entropy",
            format!(
                "label_smoothing must be in [0, 1], got {}",
                opts.label_smoothing
            ),
        ));
    }
    // Bring the class dim last and flatten to [rows, C].
    let (flat, t) = match logits.rank() {
        0 => {
            return Err(Error::invalid(
                "cross_entropy",
                "logits need a class dimension",
            ))
        }
        1 => (logits.unsqueeze(0)?, targets.reshape_to(&[1])?),
        2 => (logits.clone(), targets.clone()),
        r => {
            let mut perm: Vec<isize> = (0..r as isize).filter(|&d| d != 1).collect();
            perm.push(1);
            let moved = logits.permute(&perm)?;
            let c = logits.shape()[1];
            (
                moved.reshape_to(&[moved.numel() / c.max(1), c])?,
                targets.flatten()?,
            )
        }
    };
    let (rows, classes) = (flat.shape()[0], flat.shape()[1]);
    let expected: Vec<usize> = match logits.rank() {
        1 => vec![],
        _ => logits
            .shape()
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != 1)
            .map(|(_, &d)| d)
            .collect(),
    };
    if targets.shape() != expected.as_slice() || t.numel() != rows {
        return Err(Error::ShapeMismatch {
            op: "cross_entropy",
            lhs: logits.shape().to_vec(),
            rhs: targets.shape().to_vec(),
        });
    }
    let t = t.to_dtype(DType::I64)?;
    let ignore = opts.ignore_index.unwrap_or(i64::MIN);
    let keep = t.ne(&Tensor::scalar(ignore as f64, DType::I64)?)?;
    let target_values = t.to_vec::<i64>()?;
    if let Some(bad) = target_values
        .iter()
        .find(|&&v| v != ignore && (v < 0 || v as usize >= classes))
    {
        return Err(Error::IndexOutOfRange {
            op: "cross_entropy",
            index: *bad,
            size: classes,
        });
    }
    let safe_t = t.masked_fill(&keep.logical_not()?, 0.0)?;
    let logp = flat.log_softmax(-1)?;
    let picked = logp.gather(1, &safe_t.unsqueeze(1)?)?.squeeze(1)?.neg()?;
    let per_row = if opts.label_smoothing > 0.0 {
        let smooth = logp.mean_dims(&[-1], false)?.neg()?;
        picked
            .affine(1.0 - opts.label_smoothing, 0.0)?
            .add(&smooth.affine(opts.label_smoothing, 0.0)?)?
    } else {
        picked
    };
    let keep_f = keep.to_dtype(per_row.dtype())?;
    let per_row = per_row.mul(&keep_f)?;
    match opts.reduction {
        // The mean counts only rows that are not ignored, as in PyTorch.
        Reduction::Mean => per_row.sum()?.div(&keep_f.sum()?),
        Reduction::Sum => per_row.sum(),
        Reduction::None => per_row.reshape_to(&expected),
    }
}

/// Binary cross-entropy on logits, in the stable form max(x, 0) - x*y + log(1 + exp(-|x|)).
pub fn bce_with_logits(logits: &Tensor, targets: &Tensor, reduction: Reduction) -> Result<Tensor> {
    logits.check_float("bce_with_logits")?;
    check_same_shape("bce_with_logits", logits, targets)?;
    let y = targets.to_dtype(logits.dtype())?;
    let softplus = logits.abs()?.neg()?.exp()?.affine(1.0, 1.0)?.log()?;
    let per = logits.relu()?.sub(&logits.mul(&y)?)?.add(&softplus)?;
    reduction.apply(per)
}

pub fn mse_loss(pred: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    check_same_shape("mse_loss", pred, target)?;
    reduction.apply(pred.sub(target)?.square()?)
}

/// Quadratic below `delta`, linear above, as torch.nn.HuberLoss.
pub fn huber_loss(
    pred: &Tensor,
    target: &Tensor,
    delta: f64,
    reduction: Reduction,
) -> Result<Tensor> {
    check_same_shape("huber_loss", pred, target)?;
    if delta <= 0.0 {
        return Err(Error::invalid(
            "huber_loss",
            format!("delta must be positive, got {delta}"),
        ));
    }
    let d = pred.sub(target)?;
    let a = d.abs()?;
    let quad = d.square()?.affine(0.5, 0.0)?;
    let lin = a.affine(delta, -0.5 * delta * delta)?;
    reduction.apply(Tensor::where_cond(&a.lt_scalar(delta)?, &quad, &lin)?)
}
