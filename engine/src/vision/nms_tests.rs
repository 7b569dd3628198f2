//! Unit tests of `nms.rs` on hand-built head outputs.

use super::*;
use crate::Tensor;

/// A head output `[1, 4 + nc, anchors]` from per-anchor `([cx, cy, w, h], class scores)`.
fn head(anchors: &[([f32; 4], Vec<f32>)]) -> Tensor {
    let n = anchors.len();
    let nc = anchors[0].1.len();
    let mut data = vec![0.0f32; (4 + nc) * n];
    for (a, (b, s)) in anchors.iter().enumerate() {
        for k in 0..4 {
            data[k * n + a] = b[k];
        }
        for (k, &v) in s.iter().enumerate() {
            data[(4 + k) * n + a] = v;
        }
    }
    Tensor::from_vec(data, &[1, 4 + nc, n]).unwrap()
}

fn run(t: &Tensor, opts: &NmsOptions) -> Detections {
    non_max_suppression(t, opts).unwrap().remove(0)
}

#[test]
fn overlapping_boxes_of_one_class_keep_the_higher_score() {
    let t = head(&[
        ([10.0, 10.0, 10.0, 10.0], vec![0.6, 0.0]),
        ([10.5, 10.0, 10.0, 10.0], vec![0.9, 0.0]),
        ([50.0, 50.0, 10.0, 10.0], vec![0.7, 0.0]),
    ]);
    let d = run(&t, &NmsOptions::validation());
    assert_eq!(d.anchors, vec![1, 2]);
    assert_eq!(d.scores, vec![0.9, 0.7]);
    assert_eq!(d.boxes[0], [5.5, 5.0, 15.5, 15.0]);
    assert_eq!(d.rows()[1], [45.0, 45.0, 55.0, 55.0, 0.7, 0.0]);
}

#[test]
fn class_offsets_keep_overlapping_boxes_of_different_classes_unless_agnostic() {
    let t = head(&[
        ([10.0, 10.0, 10.0, 10.0], vec![0.9, 0.0]),
        ([10.0, 10.0, 10.0, 10.0], vec![0.0, 0.8]),
    ]);
    let aware = run(&t, &NmsOptions::validation());
    assert_eq!(aware.classes, vec![0, 1]);
    let agnostic = NmsOptions {
        agnostic: true,
        ..NmsOptions::validation()
    };
    assert_eq!(run(&t, &agnostic).classes, vec![0]);
}

#[test]
fn multi_label_gives_a_row_per_class_above_the_threshold() {
    let t = head(&[([10.0, 10.0, 4.0, 4.0], vec![0.3, 0.0005, 0.6])]);
    let multi = run(&t, &NmsOptions::validation());
    assert_eq!(multi.classes, vec![2, 0]);
    assert_eq!(multi.scores, vec![0.6, 0.3]);
    let best = run(&t, &NmsOptions::prediction());
    assert_eq!(best.classes, vec![2]);
}

#[test]
fn equal_scores_keep_the_lower_anchor_first() {
    // Three identical boxes with one score: the first anchor survives and suppresses the rest.
    let same = ([10.0, 10.0, 4.0, 4.0], vec![0.5, 0.0]);
    let t = head(&[
        ([90.0, 90.0, 4.0, 4.0], vec![0.5, 0.0]),
        same.clone(),
        same.clone(),
        same,
    ]);
    let d = run(&t, &NmsOptions::validation());
    assert_eq!(d.anchors, vec![0, 1]);
}

#[test]
fn iou_equal_to_the_threshold_does_not_suppress() {
    // Corners [0,0,2,1] and [0,0,1,1]: inter 1, union 2, IoU exactly 0.5.
    let t = head(&[
        ([1.0, 0.5, 2.0, 1.0], vec![0.9, 0.0]),
        ([0.5, 0.5, 1.0, 1.0], vec![0.8, 0.0]),
    ]);
    let at = NmsOptions {
        iou_thres: 0.5,
        ..NmsOptions::validation()
    };
    assert_eq!(run(&t, &at).len(), 2);
    let below = NmsOptions {
        iou_thres: 0.49,
        ..NmsOptions::validation()
    };
    assert_eq!(run(&t, &below).len(), 1);
}

#[test]
fn scores_equal_to_conf_thres_are_not_candidates() {
    let t = head(&[
        ([10.0, 10.0, 4.0, 4.0], vec![0.25, 0.0]),
        ([50.0, 10.0, 4.0, 4.0], vec![0.2500001, 0.0]),
    ]);
    assert_eq!(run(&t, &NmsOptions::prediction()).anchors, vec![1]);
}

#[test]
fn max_det_and_max_nms_keep_the_highest_scores() {
    let anchors: Vec<_> = (0..10)
        .map(|i| {
            (
                [i as f32 * 20.0, 0.0, 4.0, 4.0],
                vec![0.1 + i as f32 * 0.05, 0.0],
            )
        })
        .collect();
    let t = head(&anchors);
    let capped = NmsOptions {
        max_det: 3,
        ..NmsOptions::validation()
    };
    assert_eq!(run(&t, &capped).anchors, vec![9, 8, 7]);
    let pre_capped = NmsOptions {
        max_nms: 4,
        ..NmsOptions::validation()
    };
    assert_eq!(run(&t, &pre_capped).anchors, vec![9, 8, 7, 6]);
}

#[test]
fn the_class_filter_drops_other_classes() {
    let t = head(&[
        ([10.0, 10.0, 4.0, 4.0], vec![0.9, 0.0, 0.0]),
        ([50.0, 10.0, 4.0, 4.0], vec![0.0, 0.0, 0.8]),
    ]);
    let only_two = NmsOptions {
        classes: Some(vec![2]),
        ..NmsOptions::validation()
    };
    assert_eq!(run(&t, &only_two).classes, vec![2]);
}

#[test]
fn images_of_a_batch_are_independent() {
    let one = head(&[([10.0, 10.0, 4.0, 4.0], vec![0.9, 0.0])])
        .to_vec::<f32>()
        .unwrap();
    let none = vec![0.0f32; one.len()];
    let t = Tensor::from_vec([none, one].concat(), &[2, 6, 1]).unwrap();
    let out = non_max_suppression(&t, &NmsOptions::validation()).unwrap();
    assert_eq!(out.len(), 2);
    assert!(out[0].is_empty());
    assert_eq!(out[1].classes, vec![0]);
}

#[test]
fn f16_scores_are_compared_with_the_threshold_rounded_to_f16() {
    // conf 0.001 rounds to the f16 0.0010004; a score of exactly that value is not above it,
    // although it is above 0.001.
    let thr = half::f16::from_f64(0.001);
    let mut data = vec![half::f16::ZERO; 6];
    data[2] = half::f16::from_f32(4.0);
    data[3] = half::f16::from_f32(4.0);
    data[4] = thr;
    let t = Tensor::from_vec(data, &[1, 6, 1]).unwrap();
    assert!(run(&t, &NmsOptions::validation()).is_empty());
    assert!(thr.to_f32() > 0.001);
}

#[test]
fn a_head_output_of_the_wrong_rank_is_an_error() {
    let t = Tensor::from_vec(vec![0.0f32; 12], &[2, 6]).unwrap();
    assert!(non_max_suppression(&t, &NmsOptions::validation()).is_err());
    let t = Tensor::from_vec(vec![0.0f32; 8], &[1, 4, 2]).unwrap();
    assert!(non_max_suppression(&t, &NmsOptions::validation()).is_err());
}
