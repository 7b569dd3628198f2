//! The detection loss of YOLOv8 and YOLO11 (ultralytics' `v8DetectionLoss`): the assigner
//! picks which anchors learn which box, then
//! - box: `1 - CIoU` of the decoded box against its target, weighted by the anchor's target
//!   score sum;
//! - cls: binary cross-entropy of every anchor's class logits against the soft targets;
//! - dfl: the distribution focal loss of the distance bins, weighted like the box term;
//!
//! each divided by `max(sum of target scores, 1)` and scaled by its gain.

use super::assigner::{Assignment, TaskAlignedAssigner};
use super::dfl::dfl_loss;
use super::iou::{bbox_ciou, CIOU_EPS};
use super::targets::DetectionTargets;
use crate::models::yolo::head::AnchorCache;
use crate::models::yolo::{Detect, HeadOutput};
use crate::{bail, bce_with_logits, no_grad, DType, Device, Reduction, Result, Tensor};

const OP: &str = "DetectionLoss";

/// The gains of the three terms (ultralytics' `box`, `cls` and `dfl` hyperparameters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossGains {
    pub box_gain: f64,
    pub cls_gain: f64,
    pub dfl_gain: f64,
}

impl Default for LossGains {
    /// ultralytics' defaults: box 7.5, cls 0.5, dfl 1.5.
    fn default() -> Self {
        LossGains {
            box_gain: 7.5,
            cls_gain: 0.5,
            dfl_gain: 1.5,
        }
    }
}

/// What `forward` gives.
#[derive(Clone, Debug)]
pub struct LossOutput {
    /// Scalar: the sum of `loss`, what a training step calls `backward` on (ultralytics'
    /// trainer sums the vector its loss returns).
    pub total: Tensor,
    /// `[3]`: box, cls and dfl after their gains, times the batch size, as ultralytics'
    /// `v8DetectionLoss` returns them; differentiable.
    pub loss: Tensor,
    /// `[3]`: the same terms detached and not times the batch size (ultralytics' loss items,
    /// for logging).
    pub items: Tensor,
    /// What each anchor was assigned.
    pub assignment: Assignment,
}

/// ultralytics' `v8DetectionLoss` for a head of `nc` classes, `reg_max` distance bins per side
/// and these strides.
///
/// ```no_run
/// # use rusting_brain::models::yolo::loss::{DetectionLoss, DetectionTargets, LossGains};
/// # fn run(maps: &[rusting_brain::Tensor]) -> rusting_brain::Result<()> {
/// let loss_fn = DetectionLoss::new(80, 16, &[8.0, 16.0, 32.0], LossGains::default())?;
/// let mut targets = DetectionTargets::new(2);
/// targets.push(0, 3, [0.5, 0.5, 0.2, 0.3])?; // image 0, class 3, normalised x y w h
/// let out = loss_fn.forward(maps, &targets)?; // maps: [2, 64 + 80, H, W] per level
/// out.total.backward()?;
/// # Ok(()) }
/// ```
pub struct DetectionLoss {
    nc: usize,
    reg_max: usize,
    strides: Vec<f64>,
    gains: LossGains,
    assigner: TaskAlignedAssigner,
    anchors: AnchorCache,
}

impl DetectionLoss {
    /// The loss with `v8DetectionLoss`'s assigner (top-k 10, alpha 0.5, beta 6). `reg_max`
    /// must be at least 2: ultralytics' L1 variant for `reg_max` 1 is not built.
    pub fn new(nc: usize, reg_max: usize, strides: &[f64], gains: LossGains) -> Result<Self> {
        if nc == 0 {
            bail!(OP, "needs at least one class");
        }
        if reg_max < 2 {
            bail!(
                OP,
                "reg_max must be at least 2 (distance bins per side), got {reg_max}"
            );
        }
        if strides.is_empty() || strides.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            bail!(
                OP,
                "strides must be positive, one per level, got {strides:?}"
            );
        }
        Ok(DetectionLoss {
            nc,
            reg_max,
            strides: strides.to_vec(),
            gains,
            assigner: TaskAlignedAssigner::new(nc, strides),
            anchors: AnchorCache::default(),
        })
    }

    /// The loss for a model's detection head (its classes, bins and strides).
    pub fn for_head(head: &Detect, gains: LossGains) -> Result<Self> {
        DetectionLoss::new(head.nc, head.reg_max, &head.strides, gains)
    }

    pub fn assigner(&self) -> &TaskAlignedAssigner {
        &self.assigner
    }

    /// To change the assigner's settings (top-k, alpha, beta).
    pub fn assigner_mut(&mut self) -> &mut TaskAlignedAssigner {
        &mut self.assigner
    }

    pub fn gains(&self) -> LossGains {
        self.gains
    }

    /// The loss of the head's raw per-level outputs `[B, 4 * reg_max + nc, H, W]` (distance
    /// bins, then class logits), one map per stride, against the batch's labels. The input
    /// size is the first map's size times the first stride. BF16 and F16 maps are computed in
    /// F32, F64 maps in F64; gradients reach the maps.
    pub fn forward(&self, maps: &[Tensor], targets: &DetectionTargets) -> Result<LossOutput> {
        if maps.len() != self.strides.len() {
            bail!(
                OP,
                "expected {} feature maps (one per stride), got {}",
                self.strides.len(),
                maps.len()
            );
        }
        let (bins, no) = (4 * self.reg_max, 4 * self.reg_max + self.nc);
        let b = maps[0].shape().first().copied().unwrap_or(0);
        let (mut boxes, mut scores, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
        for (i, m) in maps.iter().enumerate() {
            let s = m.shape();
            if s.len() != 4 || s[0] != b || s[1] != no {
                bail!(
                    OP,
                    "map {i} has shape {s:?}; expected [{b}, {no}, H, W] ({bins} distance bins then {} class logits)",
                    self.nc
                );
            }
            sizes.push((s[2], s[3]));
            boxes.push(m.narrow(1, 0, bins)?.reshape_to(&[b, bins, s[2] * s[3]])?);
            scores.push(
                m.narrow(1, bins, self.nc)?
                    .reshape_to(&[b, self.nc, s[2] * s[3]])?,
            );
        }
        let head = HeadOutput {
            boxes: Tensor::cat(&boxes, 2)?,
            scores: Tensor::cat(&scores, 2)?,
            level_sizes: sizes,
        };
        self.forward_head(&head, targets)
    }

    /// The loss of `Detect::head`'s output (bins `[B, 4 * reg_max, A]`, logits `[B, nc, A]`).
    pub fn forward_head(&self, out: &HeadOutput, targets: &DetectionTargets) -> Result<LossOutput> {
        let b = self.check_head(out, targets)?;
        let dtype = match out.boxes.dtype() {
            DType::F64 => DType::F64,
            _ => DType::F32,
        };
        let device = out.boxes.device();
        let pred_dist = out.boxes.to_dtype(dtype)?.permute(&[0, 2, 1])?;
        let pred_scores = out.scores.to_dtype(dtype)?.permute(&[0, 2, 1])?;
        let (anchors, strides) = self.anchors_for(&out.level_sizes, device, dtype)?;
        let (h0, w0) = out.level_sizes[0];
        let input_hw = (
            (h0 as f64 * self.strides[0]) as usize,
            (w0 as f64 * self.strides[0]) as usize,
        );

        let gt = targets.padded(input_hw, dtype, device)?;
        let gt_labels = gt.narrow(2, 0, 1)?;
        let gt_bboxes = gt.narrow(2, 1, 4)?;
        let mask_gt = gt_bboxes.sum_dims(&[2], true)?.gt_scalar(0.0)?;

        let pred_bboxes = decode_boxes(&anchors, &pred_dist, self.reg_max)?;
        let assignment = no_grad(|| {
            self.assigner.assign(
                &pred_scores.detach().sigmoid()?,
                &pred_bboxes.detach().mul(&strides)?,
                &anchors.mul(&strides)?,
                &gt_labels,
                &gt_bboxes,
                &mask_gt,
            )
        })?;
        let target_scores = &assignment.target_scores;
        let score_sum = target_scores.sum()?.clamp(1.0, f64::INFINITY)?;

        let cls = bce_with_logits(&pred_scores, target_scores, Reduction::Sum)?.div(&score_sum)?;

        // Every anchor is computed and background ones are masked out (their weight is zero
        // too), so no host read of the foreground count is needed.
        let fg = assignment.fg_mask.unsqueeze(-1)?;
        let zero = Tensor::scalar(0.0, dtype)?;
        let weight = target_scores.sum_dims(&[-1], true)?;
        let target_bboxes = assignment.target_bboxes.div(&strides)?;
        let iou = bbox_ciou(&pred_bboxes, &target_bboxes, CIOU_EPS)?;
        let box_term = iou.affine(-1.0, 1.0)?.mul(&weight)?;
        let box_loss = Tensor::where_cond(&fg, &box_term, &zero)?
            .sum()?
            .div(&score_sum)?;

        let target_dist = box_to_distances(&anchors, &target_bboxes)?;
        let dfl_term = dfl_loss(&pred_dist, &target_dist, self.reg_max)?.mul(&weight)?;
        let dfl = Tensor::where_cond(&fg, &dfl_term, &zero)?
            .sum()?
            .div(&score_sum)?;

        let g = self.gains;
        let terms = Tensor::stack(
            &[
                box_loss.mul_scalar(g.box_gain)?,
                cls.mul_scalar(g.cls_gain)?,
                dfl.mul_scalar(g.dfl_gain)?,
            ],
            0,
        )?;
        let loss = terms.mul_scalar(b as f64)?;
        Ok(LossOutput {
            total: loss.sum()?,
            items: terms.detach(),
            loss,
            assignment,
        })
    }

    /// Checks the head output against the loss and the labels; gives the batch size.
    fn check_head(&self, out: &HeadOutput, targets: &DetectionTargets) -> Result<usize> {
        let (bs, ss) = (out.boxes.shape(), out.scores.shape());
        let a: usize = out.level_sizes.iter().map(|(h, w)| h * w).sum();
        let bins = 4 * self.reg_max;
        if bs.len() != 3
            || ss.len() != 3
            || bs[1] != bins
            || ss[1] != self.nc
            || bs[2] != a
            || ss[..1] != bs[..1]
            || ss[2] != a
        {
            bail!(
                OP,
                "expected bins [B, {bins}, {a}] and logits [B, {}, {a}] for levels {:?}; got {bs:?} and {ss:?}",
                self.nc,
                out.level_sizes
            );
        }
        if out.level_sizes.len() != self.strides.len() {
            bail!(
                OP,
                "expected {} levels (one per stride), got {}",
                self.strides.len(),
                out.level_sizes.len()
            );
        }
        if !out.boxes.dtype().is_float() || !out.scores.dtype().is_float() {
            bail!(OP, "the head outputs must be float tensors");
        }
        if targets.batch_size() != bs[0] {
            bail!(
                OP,
                "the labels are for a batch of {} images, the predictions for {}",
                targets.batch_size(),
                bs[0]
            );
        }
        if let Some(t) = targets.boxes().iter().find(|t| t.class >= self.nc) {
            bail!(
                OP,
                "image {} has a box of class {}, but the head has {} classes",
                t.image,
                t.class,
                self.nc
            );
        }
        Ok(bs[0])
    }

    /// Anchor centres `[A, 2]` in grid units and strides `[A, 1]`, cached per level sizes.
    fn anchors_for(
        &self,
        sizes: &[(usize, usize)],
        device: Device,
        dtype: DType,
    ) -> Result<(Tensor, Tensor)> {
        let (anchors, strides) = self.anchors.get(sizes, &self.strides, device, dtype)?;
        let total = strides.numel();
        Ok((anchors.t()?.contiguous()?, strides.reshape_to(&[total, 1])?))
    }
}

/// Boxes `[B, A, 4]` as corners in grid units: the DFL expectation of each side's bins
/// (`[B, A, 4 * reg_max]`) taken from the anchor centres `[A, 2]`.
fn decode_boxes(anchors: &Tensor, pred_dist: &Tensor, reg_max: usize) -> Result<Tensor> {
    let (b, a) = (pred_dist.shape()[0], pred_dist.shape()[1]);
    let bins = Tensor::arange(0.0, reg_max as f64, 1.0, pred_dist.dtype())?
        .to_device(pred_dist.device())?;
    let dist = pred_dist
        .reshape_to(&[b, a, 4, reg_max])?
        .softmax(-1)?
        .mul(&bins)?
        .sum_dims(&[-1], false)?;
    let (lt, rb) = (dist.narrow(-1, 0, 2)?, dist.narrow(-1, 2, 2)?);
    Tensor::cat(&[anchors.sub(&lt)?, anchors.add(&rb)?], -1)
}

/// Distances (left, top, right, bottom) `[B, A, 4]` from the anchors `[A, 2]` to the sides
/// of corner boxes `[B, A, 4]`, in the boxes' units (ultralytics' `bbox2dist`; the DFL clamps).
fn box_to_distances(anchors: &Tensor, boxes: &Tensor) -> Result<Tensor> {
    let (x1y1, x2y2) = (boxes.narrow(-1, 0, 2)?, boxes.narrow(-1, 2, 2)?);
    Tensor::cat(&[anchors.sub(&x1y1)?, x2y2.sub(anchors)?], -1)
}
