//! Distribution focal loss (ultralytics' `DFLoss`): each side's distance is learnt as a
//! distribution over `reg_max` bins, by cross-entropy against the two bins around the target
//! distance, weighted by how close the target lies to each.

use crate::{DType, Result, Tensor};

/// Per anchor `[B, A, 1]`: the mean over the four sides of
/// `-(w_l log p(l) + w_r log p(l + 1))`, where `l` is the bin below the target distance and
/// the weights split the unit between `l` and `l + 1` linearly. `pred_dist` holds the bin
/// logits `[B, A, 4 * reg_max]`; `target` the distances in grid units `[B, A, 4]`, clamped to
/// `[0, reg_max - 1.01]` so that `l + 1` is a bin. Differentiable in `pred_dist` only.
pub fn dfl_loss(pred_dist: &Tensor, target: &Tensor, reg_max: usize) -> Result<Tensor> {
    let (b, a) = (pred_dist.shape()[0], pred_dist.shape()[1]);
    let target = target
        .detach()
        .clamp(0.0, reg_max as f64 - 1.0 - 0.01)?
        .unsqueeze(-1)?;
    // The cast truncates, which is the floor for distances >= 0.
    let left = target.to_dtype(DType::I64)?;
    let right = left.add_scalar(1.0)?;
    let weight_left = right.to_dtype(target.dtype())?.sub(&target)?;
    let weight_right = weight_left.affine(-1.0, 1.0)?;
    let log_p = pred_dist.reshape_to(&[b, a, 4, reg_max])?.log_softmax(-1)?;
    let picked = log_p
        .gather(-1, &left)?
        .mul(&weight_left)?
        .add(&log_p.gather(-1, &right)?.mul(&weight_right)?)?;
    picked.neg()?.mean_dims(&[-2], false)
}
