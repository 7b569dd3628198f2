//! ultralytics' detection `ConfusionMatrix`: `[nc + 1, nc + 1]` counts indexed
//! `[predicted, true]`, the last row and column being background.
//!
//! Per image, detections at or below `conf` are dropped; then, in descending confidence
//! (stable), each detection overlapping some target by more than `iou_thres` takes the target
//! it overlaps most (class-agnostic), which is then no longer available. A matched target
//! counts at `[detected class, true class]` (on the diagonal if the classes agree), an
//! unmatched target at `[background, true class]`, an unmatched detection at
//! `[detected class, background]`. Comparisons are in f32, as in ultralytics.

use crate::vision::boxes::{box_iou, Box4};
use crate::{bail, Result};

/// The validator's matching IoU (`process_batch`'s default).
pub const CONFUSION_IOU: f32 = 0.45;

#[derive(Clone, Debug, PartialEq)]
pub struct ConfusionMatrix {
    pub nc: usize,
    /// Row-major `[nc + 1][nc + 1]`, `[predicted][true]`.
    pub matrix: Vec<Vec<f64>>,
}

/// One image's detections (corner boxes) for `process_batch`.
#[derive(Clone, Copy, Debug)]
pub struct DetectionsRef<'a> {
    pub boxes: &'a [Box4],
    pub conf: &'a [f32],
    pub classes: &'a [usize],
}

impl ConfusionMatrix {
    pub fn new(nc: usize) -> ConfusionMatrix {
        ConfusionMatrix {
            nc,
            matrix: vec![vec![0.0; nc + 1]; nc + 1],
        }
    }

    /// Adds one image. `conf` is the validator's confidence threshold (0.001 in validation).
    pub fn process_batch(
        &mut self,
        det: DetectionsRef<'_>,
        gt_boxes: &[Box4],
        gt_classes: &[usize],
        conf: f32,
        iou_thres: f32,
    ) -> Result<()> {
        let n_det = det.conf.len();
        if det.boxes.len() != n_det
            || det.classes.len() != n_det
            || gt_boxes.len() != gt_classes.len()
        {
            bail!(
                "confusion_matrix",
                "boxes, confidences and classes differ in length"
            );
        }
        if let Some(&c) = det
            .classes
            .iter()
            .chain(gt_classes)
            .find(|&&c| c >= self.nc)
        {
            bail!(
                "confusion_matrix",
                "class {c} is outside the {} classes",
                self.nc
            );
        }
        let bg = self.nc;
        // Detections above the confidence threshold, in their given order.
        let kept: Vec<usize> = (0..n_det).filter(|&i| det.conf[i] > conf).collect();
        if gt_classes.is_empty() {
            for &i in &kept {
                self.matrix[det.classes[i]][bg] += 1.0;
            }
            return Ok(());
        }
        if n_det == 0 {
            for &g in gt_classes {
                self.matrix[bg][g] += 1.0;
            }
            return Ok(());
        }
        let kept_boxes: Vec<Box4> = kept.iter().map(|&i| det.boxes[i]).collect();
        let mut iou = box_iou(gt_boxes, &kept_boxes);
        let n = kept.len();
        let mut candidates: Vec<usize> = (0..n)
            .filter(|&d| (0..gt_classes.len()).any(|g| iou[g * n + d] > iou_thres))
            .collect();
        candidates.sort_by(|&a, &b| {
            let (ca, cb) = (det.conf[kept[a]], det.conf[kept[b]]);
            cb.partial_cmp(&ca).unwrap_or(std::cmp::Ordering::Equal)
        });
        let mut gt_match: Vec<Option<usize>> = vec![None; gt_classes.len()];
        for d in candidates {
            // NumPy's argmax over the column: the first largest IoU.
            let mut best = 0;
            for g in 1..gt_classes.len() {
                if iou[g * n + d] > iou[best * n + d] {
                    best = g;
                }
            }
            if iou[best * n + d] > iou_thres {
                gt_match[best] = Some(d);
                iou[best * n..(best + 1) * n].fill(0.0);
            }
        }
        let mut matched = vec![false; n];
        for (g, &gc) in gt_classes.iter().enumerate() {
            match gt_match[g] {
                Some(d) => {
                    matched[d] = true;
                    self.matrix[det.classes[kept[d]]][gc] += 1.0;
                }
                None => self.matrix[bg][gc] += 1.0,
            }
        }
        for (d, &i) in kept.iter().enumerate() {
            if !matched[d] {
                self.matrix[det.classes[i]][bg] += 1.0;
            }
        }
        Ok(())
    }

    /// True and false positives per class (the diagonal, and each row's rest), background
    /// excluded.
    pub fn tp_fp(&self) -> (Vec<f64>, Vec<f64>) {
        (0..self.nc)
            .map(|c| {
                let tp = self.matrix[c][c];
                (tp, self.matrix[c].iter().sum::<f64>() - tp)
            })
            .unzip()
    }

    /// Each column (true class) divided by its sum, as ultralytics' normalized plot shows it;
    /// a column without samples stays zero.
    pub fn normalized(&self) -> Vec<Vec<f64>> {
        crate::metrics::normalize_matrix(&self.matrix, crate::metrics::Normalize::Columns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Box4 = [0.0, 0.0, 10.0, 10.0];
    const B: Box4 = [50.0, 50.0, 60.0, 60.0];

    fn dets<'a>(boxes: &'a [Box4], conf: &'a [f32], classes: &'a [usize]) -> DetectionsRef<'a> {
        DetectionsRef {
            boxes,
            conf,
            classes,
        }
    }

    #[test]
    fn matches_count_on_the_diagonal_or_as_confusions() {
        let mut cm = ConfusionMatrix::new(2);
        // Detection 0 on target 0 with the right class, detection 1 on target 1 with the wrong
        // one.
        let boxes = [A, B];
        cm.process_batch(
            dets(&boxes, &[0.9, 0.8], &[0, 0]),
            &[A, B],
            &[0, 1],
            0.25,
            0.45,
        )
        .unwrap();
        assert_eq!(
            cm.matrix,
            vec![vec![1.0, 1.0, 0.0], vec![0.0; 3], vec![0.0; 3]]
        );
    }

    #[test]
    fn unmatched_detections_and_targets_go_to_background() {
        let mut cm = ConfusionMatrix::new(2);
        let boxes = [A, [100.0, 100.0, 110.0, 110.0]];
        cm.process_batch(
            dets(&boxes, &[0.9, 0.8], &[0, 1]),
            &[A, B],
            &[0, 1],
            0.25,
            0.45,
        )
        .unwrap();
        assert_eq!(cm.matrix[0][0], 1.0);
        assert_eq!(cm.matrix[1][2], 1.0); // false positive of class 1
        assert_eq!(cm.matrix[2][1], 1.0); // missed target of class 1
    }

    #[test]
    fn a_target_goes_to_the_most_confident_detection() {
        let mut cm = ConfusionMatrix::new(2);
        let boxes = [A, A];
        cm.process_batch(dets(&boxes, &[0.5, 0.9], &[0, 1]), &[A], &[1], 0.25, 0.45)
            .unwrap();
        assert_eq!(cm.matrix[1][1], 1.0);
        assert_eq!(cm.matrix[0][2], 1.0);
    }

    #[test]
    fn detections_at_or_below_conf_are_ignored() {
        let mut cm = ConfusionMatrix::new(1);
        cm.process_batch(dets(&[A], &[0.25], &[0]), &[], &[], 0.25, 0.45)
            .unwrap();
        assert_eq!(cm.matrix, vec![vec![0.0; 2]; 2]);
    }

    #[test]
    fn a_class_outside_the_matrix_is_an_error() {
        let mut cm = ConfusionMatrix::new(1);
        assert!(cm
            .process_batch(dets(&[A], &[0.9], &[3]), &[], &[], 0.25, 0.45)
            .is_err());
    }

    #[test]
    fn normalized_divides_each_true_class_column_by_its_sum() {
        let mut cm = ConfusionMatrix::new(1);
        cm.matrix = vec![vec![3.0, 1.0], vec![1.0, 0.0]];
        assert_eq!(cm.normalized(), [vec![0.75, 1.0], vec![0.25, 0.0]]);
        cm.matrix = vec![vec![0.0, 0.0], vec![0.0, 2.0]];
        assert_eq!(cm.normalized(), [vec![0.0, 0.0], vec![0.0, 1.0]]);
    }
}
