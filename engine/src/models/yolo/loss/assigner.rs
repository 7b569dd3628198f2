//! The task-aligned assigner (ultralytics' `TaskAlignedAssigner`, as `v8DetectionLoss` sets it
//! up): which anchors learn which ground-truth box, and with what soft class target.
//!
//! For every (image, box, anchor) the alignment metric is `score^alpha * CIoU^beta`, counted
//! only where the anchor's centre lies inside the box (sides below the middle stride raised to
//! it about the centre). Each box takes the `topk` anchors of highest metric among those; an
//! anchor taken by several boxes goes to the box it overlaps most. Class targets are one-hot,
//! scaled per anchor by its metric normalised so that each box's best anchor gets the box's
//! best IoU.
//!
//! The whole batch is computed at once with tensor ops (no loop over images), without
//! gradient, on the device of the inputs: the top-k selection is `topk` passes of `argmax`,
//! which stay on the device where `Tensor::topk` would read the metrics back to the host.
//! Among equal metrics the earlier anchor is taken (torch's `topk` leaves that order open).

use super::iou::{bbox_ciou, CIOU_EPS};
use crate::{bail, no_grad, DType, Result, Tensor};

/// The assigner's settings. `new` gives `v8DetectionLoss`'s: top-k 10, alpha 0.5, beta 6.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskAlignedAssigner {
    /// Anchors each box takes (fewer when the image has fewer anchors).
    pub topk: usize,
    pub num_classes: usize,
    /// Exponent of the class score in the metric.
    pub alpha: f64,
    /// Exponent of the CIoU in the metric.
    pub beta: f64,
    /// Keeps the normalisation finite for a box whose anchors all have a zero metric.
    pub eps: f64,
    /// Box sides below this (pixels) are raised to it for the inside-the-box test: the middle
    /// stride (ultralytics' `stride_val`), so a tiny box still covers an anchor.
    pub min_side: f64,
}

/// What each anchor learns: `[B, A]` unless noted.
#[derive(Clone, Debug)]
pub struct Assignment {
    /// I64: the class of the anchor's box (of box 0 for background anchors).
    pub target_labels: Tensor,
    /// `[B, A, 4]`: the anchor's box, corners in pixels.
    pub target_bboxes: Tensor,
    /// `[B, A, nc]`: the soft class targets (zero rows for background anchors).
    pub target_scores: Tensor,
    /// Bool: the anchor learns a box (foreground).
    pub fg_mask: Tensor,
    /// I64: the index of the anchor's box within its image (0 for background anchors).
    pub target_gt_idx: Tensor,
}

impl TaskAlignedAssigner {
    /// `v8DetectionLoss`'s assigner for `num_classes` classes and a head of these strides.
    pub fn new(num_classes: usize, strides: &[f64]) -> Self {
        let min_side = strides.get(1).or(strides.first()).copied().unwrap_or(0.0);
        TaskAlignedAssigner {
            topk: 10,
            num_classes,
            alpha: 0.5,
            beta: 6.0,
            eps: 1e-9,
            min_side,
        }
    }

    /// Assigns the boxes of a batch to its anchors.
    /// - `pd_scores` `[B, A, nc]`: class probabilities (after the sigmoid);
    /// - `pd_bboxes` `[B, A, 4]`: predicted corners in pixels;
    /// - `anchor_points` `[A, 2]`: anchor centres in pixels;
    /// - `gt_labels` `[B, M, 1]`, `gt_bboxes` `[B, M, 4]` (corners in pixels) and `mask_gt`
    ///   `[B, M, 1]` (non-zero for real boxes, zero for padding).
    ///
    /// Everything is computed in `pd_bboxes`' dtype, without gradient.
    pub fn assign(
        &self,
        pd_scores: &Tensor,
        pd_bboxes: &Tensor,
        anchor_points: &Tensor,
        gt_labels: &Tensor,
        gt_bboxes: &Tensor,
        mask_gt: &Tensor,
    ) -> Result<Assignment> {
        self.check_shapes(
            pd_scores,
            pd_bboxes,
            anchor_points,
            gt_labels,
            gt_bboxes,
            mask_gt,
        )?;
        no_grad(|| {
            let dtype = pd_bboxes.dtype();
            let (pd_scores, gt_bboxes) = (pd_scores.to_dtype(dtype)?, gt_bboxes.to_dtype(dtype)?);
            let anchor_points = anchor_points.to_dtype(dtype)?;
            if gt_bboxes.shape()[1] == 0 {
                return self.background(&pd_scores);
            }
            let labels = gt_labels.squeeze(-1)?.to_dtype(DType::I64)?;
            let mask_gt = mask_gt.ne(&Tensor::scalar(0.0, mask_gt.dtype())?)?;
            let inside = self.candidates_in_boxes(&anchor_points, &gt_bboxes, &mask_gt)?;
            let candidates = inside.logical_and(&mask_gt)?;
            let (metric, overlaps) =
                self.box_metrics(&pd_scores, pd_bboxes, &labels, &gt_bboxes, &candidates)?;
            let chosen = top_k_mask(&metric, self.topk)?;
            let mask_pos = chosen.logical_and(&candidates)?.to_dtype(dtype)?;
            let (mask_pos, fg, gt_idx) = resolve_shared_anchors(&mask_pos, &overlaps)?;
            self.targets(
                &labels, &gt_bboxes, &gt_idx, &fg, &metric, &overlaps, &mask_pos,
            )
        })
    }

    fn check_shapes(
        &self,
        pd_scores: &Tensor,
        pd_bboxes: &Tensor,
        anchor_points: &Tensor,
        gt_labels: &Tensor,
        gt_bboxes: &Tensor,
        mask_gt: &Tensor,
    ) -> Result<()> {
        let (s, b) = (pd_scores.shape(), pd_bboxes.shape());
        let ok = s.len() == 3
            && s[2] == self.num_classes
            && b.len() == 3
            && b[..2] == s[..2]
            && b[2] == 4
            && anchor_points.shape() == [s[1], 2]
            && gt_bboxes.rank() == 3
            && gt_bboxes.shape()[0] == s[0]
            && gt_bboxes.shape()[2] == 4
            && gt_labels.shape() == [s[0], gt_bboxes.shape()[1], 1]
            && mask_gt.shape() == gt_labels.shape();
        if !ok {
            bail!(
                "TaskAlignedAssigner",
                "expected pd_scores [B, A, {}], pd_bboxes [B, A, 4], anchor_points [A, 2], gt_labels and mask_gt [B, M, 1], gt_bboxes [B, M, 4]; got {:?}, {:?}, {:?}, {:?}, {:?}, {:?}",
                self.num_classes,
                s,
                b,
                anchor_points.shape(),
                gt_labels.shape(),
                mask_gt.shape(),
                gt_bboxes.shape()
            );
        }
        Ok(())
    }

    /// No boxes in the batch: every anchor is background.
    fn background(&self, pd_scores: &Tensor) -> Result<Assignment> {
        let (b, a, device) = (
            pd_scores.shape()[0],
            pd_scores.shape()[1],
            pd_scores.device(),
        );
        let dtype = pd_scores.dtype();
        Ok(Assignment {
            target_labels: Tensor::full(self.num_classes as f64, &[b, a], DType::I64, device)?,
            target_bboxes: Tensor::zeros(&[b, a, 4], dtype, device)?,
            target_scores: Tensor::zeros(&[b, a, self.num_classes], dtype, device)?,
            fg_mask: Tensor::zeros(&[b, a], DType::Bool, device)?,
            target_gt_idx: Tensor::zeros(&[b, a], DType::I64, device)?,
        })
    }

    /// Bool `[B, M, A]`: the anchor's centre lies strictly inside the box (by more than 1e-9),
    /// real boxes' sides below `min_side` raised to it about their centre. `mask_gt` is Bool
    /// `[B, M, 1]`.
    fn candidates_in_boxes(
        &self,
        anchors: &Tensor,
        gt_bboxes: &Tensor,
        mask_gt: &Tensor,
    ) -> Result<Tensor> {
        const EPS: f64 = 1e-9;
        let [x1, y1, x2, y2] = split4(gt_bboxes)?;
        // Through centre and size, in ultralytics' order, so unchanged boxes round the same.
        let (cx, cy) = (x1.add(&x2)?.div_scalar(2.0)?, y1.add(&y2)?.div_scalar(2.0)?);
        let raise = |side: Tensor| -> Result<Tensor> {
            let small = side.lt_scalar(self.min_side)?.logical_and(mask_gt)?;
            side.masked_fill(&small, self.min_side)?.div_scalar(2.0)
        };
        let (half_w, half_h) = (raise(x2.sub(&x1)?)?, raise(y2.sub(&y1)?)?);
        let (left, top) = (cx.sub(&half_w)?, cy.sub(&half_h)?);
        let (right, bottom) = (cx.add(&half_w)?, cy.add(&half_h)?);
        // Anchors along the last dim: [1, 1, A] against box sides [B, M, 1].
        let a = anchors.shape()[0];
        let ax = anchors.narrow(1, 0, 1)?.reshape_to(&[1, 1, a])?;
        let ay = anchors.narrow(1, 1, 1)?.reshape_to(&[1, 1, a])?;
        let mut mask = ax.sub(&left)?.gt_scalar(EPS)?;
        for m in [
            ay.sub(&top)?.gt_scalar(EPS)?,
            right.sub(&ax)?.gt_scalar(EPS)?,
            bottom.sub(&ay)?.gt_scalar(EPS)?,
        ] {
            mask = mask.logical_and(&m)?;
        }
        Ok(mask)
    }

    /// The alignment metric and the CIoU (clamped at 0), `[B, M, A]`, zero off `candidates`.
    fn box_metrics(
        &self,
        pd_scores: &Tensor,
        pd_bboxes: &Tensor,
        labels: &Tensor,
        gt_bboxes: &Tensor,
        candidates: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let (b, m, a) = (labels.shape()[0], labels.shape()[1], pd_scores.shape()[1]);
        // Each box's class score at every anchor: [B, nc, A] gathered along the classes.
        let index = labels.unsqueeze(-1)?.expand(&[b, m, a])?.contiguous()?;
        let scores = pd_scores.transpose(1, 2)?.gather(1, &index)?;
        let ciou = bbox_ciou(&gt_bboxes.unsqueeze(2)?, &pd_bboxes.unsqueeze(1)?, CIOU_EPS)?;
        let overlaps = ciou.squeeze(-1)?.clamp(0.0, f64::INFINITY)?;
        let metric = scores
            .pow_scalar(self.alpha)?
            .mul(&overlaps.pow_scalar(self.beta)?)?;
        let zero = Tensor::scalar(0.0, overlaps.dtype())?;
        Ok((
            Tensor::where_cond(candidates, &metric, &zero)?,
            Tensor::where_cond(candidates, &overlaps, &zero)?,
        ))
    }

    /// Labels, boxes and soft scores of the assigned boxes.
    #[allow(clippy::too_many_arguments)]
    fn targets(
        &self,
        labels: &Tensor,
        gt_bboxes: &Tensor,
        gt_idx: &Tensor,
        fg: &Tensor,
        metric: &Tensor,
        overlaps: &Tensor,
        mask_pos: &Tensor,
    ) -> Result<Assignment> {
        let (b, a) = (gt_idx.shape()[0], gt_idx.shape()[1]);
        let device = gt_idx.device();
        let target_labels = labels.gather(1, gt_idx)?.clamp(0.0, f64::INFINITY)?;
        let box_index = gt_idx.unsqueeze(-1)?.expand(&[b, a, 4])?.contiguous()?;
        let target_bboxes = gt_bboxes.gather(1, &box_index)?;
        let classes = Tensor::arange(0.0, self.num_classes as f64, 1.0, DType::I64)?
            .to_device(device)?
            .reshape_to(&[1, 1, self.num_classes])?;
        let one_hot = classes
            .eq(&target_labels.unsqueeze(-1)?)?
            .logical_and(&fg.unsqueeze(-1)?)?;

        // Each box's metrics scaled so that its best anchor gets its best IoU; each anchor
        // then takes the largest over the boxes.
        let metric = metric.mul(mask_pos)?;
        let best_metric = metric.max_dims(&[-1], true)?;
        let best_overlap = overlaps.mul(mask_pos)?.max_dims(&[-1], true)?;
        let norm = metric
            .mul(&best_overlap)?
            .div(&best_metric.add_scalar(self.eps)?)?
            .max_dims(&[-2], false)?
            .unsqueeze(-1)?;
        Ok(Assignment {
            target_scores: one_hot.to_dtype(norm.dtype())?.mul(&norm)?,
            target_labels,
            target_bboxes,
            fg_mask: fg.clone(),
            target_gt_idx: gt_idx.clone(),
        })
    }
}

/// An anchor taken by several boxes keeps only the box it overlaps most (the first such box
/// on a tie); then each anchor's box index and whether it has one. Gives the updated
/// `mask_pos`, the foreground mask (Bool `[B, A]`) and the box indices (I64 `[B, A]`).
fn resolve_shared_anchors(
    mask_pos: &Tensor,
    overlaps: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let m = mask_pos.shape()[1];
    let shared = mask_pos.sum_dims(&[-2], true)?.gt_scalar(1.0)?;
    let best = overlaps.argmax(Some(1), true)?;
    let boxes = Tensor::arange(0.0, m as f64, 1.0, DType::I64)?
        .to_device(mask_pos.device())?
        .reshape_to(&[1, m, 1])?;
    let is_best = boxes.eq(&best)?.to_dtype(mask_pos.dtype())?;
    let mask_pos = Tensor::where_cond(&shared, &is_best, mask_pos)?;
    let fg = mask_pos.max_dims(&[-2], false)?.gt_scalar(0.0)?;
    let gt_idx = mask_pos.argmax(Some(-2), false)?;
    Ok((mask_pos, fg, gt_idx))
}

/// Bool, `metrics`' shape: the `k` largest entries along the last dim (all of them when the
/// dim is shorter), the earlier one first among equals, as a stable `topk`. Made of `k`
/// passes of `argmax`, each ruling out its pick, so it runs on the tensor's device. The
/// entries must not be NaN or -inf (the metric lies in [0, 1]).
pub fn top_k_mask(metrics: &Tensor, k: usize) -> Result<Tensor> {
    let n = *metrics
        .shape()
        .last()
        .ok_or_else(|| crate::Error::invalid("top_k_mask", "needs at least one dim"))?;
    let positions = Tensor::arange(0.0, n as f64, 1.0, DType::I64)?.to_device(metrics.device())?;
    let mut left = metrics.clone();
    for _ in 0..k.min(n) {
        let pick = left.argmax(Some(-1), true)?;
        left = left.masked_fill(&positions.eq(&pick)?, f64::NEG_INFINITY)?;
    }
    left.eq_scalar(f64::NEG_INFINITY)
}

/// The four columns of `[.., 4]` boxes, each `[.., 1]`.
fn split4(b: &Tensor) -> Result<[Tensor; 4]> {
    Ok([
        b.narrow(-1, 0, 1)?,
        b.narrow(-1, 1, 1)?,
        b.narrow(-1, 2, 1)?,
        b.narrow(-1, 3, 1)?,
    ])
}
