//! Unit tests of `ap.rs`. Expected values come from ultralytics' `ap_per_class` (its NumPy
//! code, run with NumPy 2.4 on the same inputs).

use super::*;

fn tp_row(bits: &str) -> [bool; NIOU] {
    let b = bits.as_bytes();
    std::array::from_fn(|k| b[k] == b'1')
}

/// Three target classes (0: six targets, 1: four, 3: one without predictions) and twelve
/// predictions of classes 0, 1 and 2 (2 has no targets), in shuffled order.
fn mixed_case() -> DetectionStats {
    let rows = [
        "1111000000",
        "1111111110",
        "0000000000",
        "1111111000",
        "0000000000",
        "1100000000",
        "1111111111",
        "0000000000",
        "1000000000",
        "1111111110",
        "1111110000",
        "1111100000",
    ];
    DetectionStats {
        tp: rows.iter().map(|r| tp_row(r)).collect(),
        conf: vec![
            0.62, 0.91, 0.05, 0.80, 0.33, 0.85, 0.12, 0.77, 0.41, 0.70, 0.55, 0.20,
        ],
        pred_cls: vec![1, 0, 0, 1, 1, 0, 1, 0, 0, 2, 0, 0],
        target_cls: vec![0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 3],
    }
}

fn assert_close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-12,
        "{what}: got {got}, want {want}"
    );
}

#[test]
fn ap_per_class_matches_ultralytics_on_a_mixed_case() {
    let r = ap_per_class(&mixed_case());
    assert_eq!(r.classes, vec![0, 1, 3]);
    assert_eq!(r.best_index, 123);
    let want_ap = [
        [
            0.7516666666666669,
            0.5683333333333334,
            0.32999999999999996,
            0.32999999999999996,
            0.32999999999999996,
            0.25,
            0.16500000000000004,
            0.16500000000000004,
            0.16500000000000004,
            0.0,
        ],
        [
            0.6825, 0.6825, 0.6825, 0.6825, 0.37, 0.37, 0.37, 0.06125, 0.06125, 0.06125,
        ],
        [0.0; NIOU],
    ];
    for (c, want) in want_ap.iter().enumerate() {
        for (k, &w) in want.iter().enumerate() {
            assert_close(r.ap[c][k], w, &format!("ap[{c}][{k}]"));
        }
    }
    let want_p = [0.7723199375305124, 0.7487606644561805, 0.0];
    let want_r = [0.8333333333333334, 0.7462819933685416, 0.0];
    let want_f1 = [0.801667408052344, 0.7475192741849161, 0.0];
    for c in 0..3 {
        assert_close(r.p[c], want_p[c], "p");
        assert_close(r.r[c], want_r[c], "r");
        assert_close(r.f1[c], want_f1[c], "f1");
    }
    assert_eq!(r.tp, vec![5.0, 3.0, 0.0]);
    assert_eq!(r.fp, vec![1.0, 1.0, 0.0]);
}

#[test]
fn equal_confidences_are_visited_in_the_given_order() {
    // Class 0 with three targets; the two predictions at 0.5 are a miss and a hit.
    let stats = DetectionStats {
        tp: vec![[true; NIOU], [false; NIOU], [true; NIOU], [true; NIOU]],
        conf: vec![0.9, 0.5, 0.5, 0.3],
        pred_cls: vec![0; 4],
        target_cls: vec![0; 3],
    };
    let stable = ap_per_class(&stats);
    assert_close(stable.ap[0][0], 0.8300000000000002, "miss first");
    let swapped = ap_per_class_in_order(&stats, &[0, 2, 1, 3]);
    assert_close(swapped.ap[0][0], 0.9125000000000002, "hit first");
    assert_close(stable.p[0], 0.75, "p");
    assert_close(stable.r[0], 1.0, "r");
}

#[test]
fn compute_ap_of_a_perfect_detector_is_0995() {
    // The last of the 101 samples lands on the sentinel precision 0, so ultralytics' AP of a
    // perfect detector is 0.995, not 1.
    let ap = compute_ap(&[0.5, 1.0], &[1.0, 1.0]);
    assert_close(ap, 0.995, "ap");
}

#[test]
fn no_targets_give_empty_results() {
    let stats = DetectionStats {
        tp: vec![[true; NIOU]],
        conf: vec![0.9],
        pred_cls: vec![0],
        target_cls: vec![],
    };
    let r = ap_per_class(&stats);
    assert!(r.classes.is_empty() && r.ap.is_empty() && r.p.is_empty());
}

#[test]
fn pr_curves_start_at_precision_one_and_follow_a_perfect_detector() {
    // One class, two targets, two true detections: precision 1 at every recall up to 1.
    let stats = DetectionStats {
        tp: vec![tp_row("1111111111"), tp_row("1111111111")],
        conf: vec![0.9, 0.6],
        pred_cls: vec![0, 0],
        target_cls: vec![0, 0],
    };
    let r = ap_per_class(&stats);
    let (grid, curves) = r.pr_curves(11);
    assert_eq!(grid.len(), 11);
    assert_eq!(curves.len(), 1);
    assert!(
        curves[0].iter().all(|p| (p - 1.0).abs() < 1e-9),
        "{:?}",
        curves[0]
    );
    // The mixed case: a class that is found starts at precision 1 (the curve's convention); a
    // class never found stays at 0; every value is a precision.
    let r = ap_per_class(&mixed_case());
    let (_, curves) = r.pr_curves(101);
    for (c, curve) in curves.iter().enumerate() {
        let found = r.r_curve[c].iter().any(|&v| v > 0.0);
        assert_eq!(curve[0], if found { 1.0 } else { 0.0 }, "class index {c}");
        assert!(curve.iter().all(|p| (0.0..=1.0).contains(p)));
    }
}
