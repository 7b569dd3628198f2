//! Which predictions of one image are true positives, at each IoU threshold: ultralytics'
//! `BaseValidator.match_predictions` (its default greedy path, not the scipy one) and the
//! detection validator's `_process_batch` / `_prepare_batch`.
//!
//! Predictions are visited in their given order (NMS output: descending confidence). Each
//! prediction that overlaps some same-class target by at least the smallest threshold takes,
//! per threshold, the unclaimed target with the largest IoU (the first on ties), and is correct
//! at that threshold if the IoU reaches it; a correct match claims the target for that
//! threshold only. IoUs are ultralytics' `box_iou` in f32, compared with f32 thresholds.

use crate::vision::boxes::{box_iou, xywh_to_xyxy, Box4};
use crate::vision::RatioPad;

/// The number of IoU thresholds of mAP50-95.
pub const NIOU: usize = 10;

/// `torch.linspace(0.5, 0.95, 10)` in f32, as the validator builds its `iouv`: PyTorch's CPU
/// kernel fills the first half as `start + step * i` and the second as `end - step * (n-1-i)`.
pub fn iou_thresholds() -> [f32; NIOU] {
    let (start, end) = (0.5f32, 0.95f32);
    let step = (end - start) / (NIOU - 1) as f32;
    std::array::from_fn(|i| {
        if i < NIOU / 2 {
            start + step * i as f32
        } else {
            end - step * (NIOU - 1 - i) as f32
        }
    })
}

/// The correct-at-threshold matrix `[n_pred][NIOU]`. `iou` is `[n_true, n_pred]` row-major
/// (targets are rows), as `box_iou(targets, predictions)` returns it.
pub fn match_predictions(
    pred_classes: &[usize],
    true_classes: &[usize],
    iou: &[f32],
    thresholds: &[f32; NIOU],
) -> Vec<[bool; NIOU]> {
    let (n_pred, n_true) = (pred_classes.len(), true_classes.len());
    let mut correct = vec![[false; NIOU]; n_pred];
    if iou.len() != n_pred * n_true {
        return correct;
    }
    // IoU with targets of another class counts as zero.
    let masked = |t: usize, p: usize| {
        if true_classes[t] == pred_classes[p] {
            iou[t * n_pred + p]
        } else {
            0.0
        }
    };
    let lowest = thresholds.iter().copied().fold(f32::INFINITY, f32::min);
    let mut claimed = vec![[false; NIOU]; n_true];
    for (p, row) in correct.iter_mut().enumerate() {
        if !(0..n_true).any(|t| masked(t, p) >= lowest) {
            continue;
        }
        for (k, &threshold) in thresholds.iter().enumerate() {
            // The best unclaimed target at this threshold (NumPy's argmax: first maximum).
            let mut best = 0;
            let mut best_iou = f32::NEG_INFINITY;
            for (t, taken) in claimed.iter().enumerate().take(n_true) {
                let v = if taken[k] { 0.0 } else { masked(t, p) };
                if v > best_iou {
                    (best, best_iou) = (t, v);
                }
            }
            row[k] = best_iou >= threshold;
            claimed[best][k] |= row[k];
        }
    }
    correct
}

/// The tp matrix of one image from its predictions and targets (both corner boxes in the same
/// pixel space): all false when either side is empty, as `_process_batch` returns.
pub fn true_positives(
    pred_boxes: &[Box4],
    pred_classes: &[usize],
    true_boxes: &[Box4],
    true_classes: &[usize],
) -> Vec<[bool; NIOU]> {
    if pred_boxes.is_empty() || true_boxes.is_empty() {
        return vec![[false; NIOU]; pred_classes.len()];
    }
    let iou = box_iou(true_boxes, pred_boxes);
    match_predictions(pred_classes, true_classes, &iou, &iou_thresholds())
}

/// Dataset labels (normalized `[cx, cy, w, h]` of the original image) as corner boxes in the
/// letterboxed image's pixels, where the validator matches them (`_prepare_batch`): converted
/// first, then scaled by the resize and shifted by the padding, in f32.
pub fn target_boxes_on_canvas(normalized_xywh: &[Box4], rp: &RatioPad) -> Vec<Box4> {
    let sx = (rp.orig_hw.1 as f64 * rp.gain_hw.1) as f32;
    let sy = (rp.orig_hw.0 as f64 * rp.gain_hw.0) as f32;
    let (px, py) = (rp.pad_xy.0 as f32, rp.pad_xy.1 as f32);
    normalized_xywh
        .iter()
        .map(|&b| {
            let c = xywh_to_xyxy(b);
            [
                c[0] * sx + px,
                c[1] * sy + py,
                c[2] * sx + px,
                c[3] * sy + py,
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iou_thresholds_run_from_half_to_095() {
        let t = iou_thresholds();
        assert_eq!(t[0], 0.5);
        assert_eq!(t[9], 0.95);
        assert!((t[5] - 0.75).abs() < 1e-6);
    }

    #[test]
    fn a_prediction_is_correct_up_to_its_iou() {
        // One target, one prediction of the same class with IoU 0.72.
        let c = match_predictions(&[0], &[0], &[0.72], &iou_thresholds());
        assert_eq!(
            c[0],
            [true, true, true, true, true, false, false, false, false, false]
        );
    }

    #[test]
    fn a_prediction_of_another_class_is_never_correct() {
        let c = match_predictions(&[1], &[0], &[0.99], &iou_thresholds());
        assert_eq!(c[0], [false; NIOU]);
    }

    #[test]
    fn a_claimed_target_goes_to_the_first_prediction_only() {
        // Two predictions on one target; the first (higher confidence) claims it, the second
        // finds nothing left although its IoU is higher.
        let c = match_predictions(&[0, 0], &[0], &[0.6, 0.9], &iou_thresholds());
        assert!(c[0][0]);
        assert!(!c[1][0]);
        // At 0.65 the first prediction fails, so the second takes the target there.
        assert!(!c[0][3]);
        assert!(c[1][3]);
    }

    #[test]
    fn a_prediction_takes_the_best_unclaimed_target() {
        // Rows are targets: t0 = [0.55, 0.7], t1 = [0.8, 0.75]. Prediction 0 takes t1 (0.8);
        // prediction 1 would prefer t1 (0.75) but it is claimed, so it takes t0 (0.7).
        let iou = [0.55, 0.7, 0.8, 0.75];
        let c = match_predictions(&[0, 0], &[0, 0], &iou, &iou_thresholds());
        assert!(c[0][5]); // 0.8 >= 0.75
        assert!(c[1][3]); // t0: 0.7 >= 0.65
        assert!(!c[1][5]); // t0: 0.7 < 0.75, and t1 is claimed at 0.75
    }

    #[test]
    fn empty_sides_give_an_all_false_matrix() {
        let tp = true_positives(&[[0.0, 0.0, 1.0, 1.0]], &[0], &[], &[]);
        assert_eq!(tp, vec![[false; NIOU]]);
    }

    #[test]
    fn target_boxes_scale_to_pixels_after_conversion() {
        let same = RatioPad {
            gain_hw: (1.0, 1.0),
            pad_xy: (0.0, 0.0),
            orig_hw: (480, 640),
        };
        let b = target_boxes_on_canvas(&[[0.5, 0.5, 0.5, 0.25]], &same);
        assert_eq!(b[0], [160.0, 180.0, 480.0, 300.0]);
        // Halved and padded: 16 pixels on the left, 8 on top.
        let letterboxed = RatioPad {
            gain_hw: (0.5, 0.5),
            pad_xy: (16.0, 8.0),
            orig_hw: (480, 640),
        };
        let b = target_boxes_on_canvas(&[[0.5, 0.5, 0.5, 0.25]], &letterboxed);
        assert_eq!(b[0], [96.0, 98.0, 256.0, 158.0]);
    }
}
