//! Complete IoU of box pairs as tensors, as ultralytics' `bbox_iou(..., xywh=False, CIoU=True)`:
//! IoU minus the squared centre distance over the enclosing box's squared diagonal, minus the
//! aspect-ratio term `alpha * v`. `alpha` is a weight computed without gradient; `v` keeps its
//! gradient. The operation order follows ultralytics', so the values agree to rounding.

use crate::{no_grad, Result, Tensor};

/// ultralytics' default `eps` for `bbox_iou`.
pub const CIOU_EPS: f64 = 1e-7;

/// CIoU of `box1` and `box2`, corners (x1, y1, x2, y2) along the last dim, broadcast
/// together; the result keeps a last dim of 1. Heights get `eps` added (widths do not, as in
/// ultralytics), so a flat box gives a finite aspect ratio. Differentiable in both boxes.
pub fn bbox_ciou(box1: &Tensor, box2: &Tensor, eps: f64) -> Result<Tensor> {
    let [b1x1, b1y1, b1x2, b1y2] = corners(box1)?;
    let [b2x1, b2y1, b2x2, b2y2] = corners(box2)?;
    let w1 = b1x2.sub(&b1x1)?;
    let h1 = b1y2.sub(&b1y1)?.add_scalar(eps)?;
    let w2 = b2x2.sub(&b2x1)?;
    let h2 = b2y2.sub(&b2y1)?.add_scalar(eps)?;

    let overlap_w = b1x2
        .minimum(&b2x2)?
        .sub(&b1x1.maximum(&b2x1)?)?
        .clamp(0.0, f64::INFINITY)?;
    let overlap_h = b1y2
        .minimum(&b2y2)?
        .sub(&b1y1.maximum(&b2y1)?)?
        .clamp(0.0, f64::INFINITY)?;
    let inter = overlap_w.mul(&overlap_h)?;
    let union = w1
        .mul(&h1)?
        .add(&w2.mul(&h2)?)?
        .sub(&inter)?
        .add_scalar(eps)?;
    let iou = inter.div(&union)?;

    // The smallest enclosing box's squared diagonal and the squared centre distance.
    let cw = b1x2.maximum(&b2x2)?.sub(&b1x1.minimum(&b2x1)?)?;
    let ch = b1y2.maximum(&b2y2)?.sub(&b1y1.minimum(&b2y1)?)?;
    let c2 = cw.square()?.add(&ch.square()?)?.add_scalar(eps)?;
    let dx = b2x1.add(&b2x2)?.sub(&b1x1)?.sub(&b1x2)?;
    let dy = b2y1.add(&b2y2)?.sub(&b1y1)?.sub(&b1y2)?;
    let rho2 = dx.square()?.add(&dy.square()?)?.div_scalar(4.0)?;

    let aspect = w2.div(&h2)?.atan()?.sub(&w1.div(&h1)?.atan()?)?;
    let v = aspect
        .square()?
        .mul_scalar(4.0 / (std::f64::consts::PI * std::f64::consts::PI))?;
    let alpha = no_grad(|| {
        let (v, iou) = (v.detach(), iou.detach());
        v.div(&iou.affine(-1.0, 1.0)?.add(&v)?.add_scalar(eps)?)
    })?;
    iou.sub(&rho2.div(&c2)?.add(&v.mul(&alpha)?)?)
}

/// The four coordinates along the last dim, each keeping a last dim of 1.
fn corners(b: &Tensor) -> Result<[Tensor; 4]> {
    if b.shape().last() != Some(&4) {
        crate::bail!(
            "bbox_ciou",
            "boxes need 4 corner values along the last dim, got shape {:?}",
            b.shape()
        );
    }
    let parts = b.chunk(4, -1)?;
    Ok([
        parts[0].clone(),
        parts[1].clone(),
        parts[2].clone(),
        parts[3].clone(),
    ])
}
