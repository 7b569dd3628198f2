//! Average precision per class: ultralytics' `ap_per_class` and `compute_ap`, in f64 as NumPy
//! computes them (see `numeric.rs` for the NumPy pieces).
//!
//! Predictions are sorted by descending confidence. For each class that has targets, the
//! cumulative true and false positives give recall `tpc / (n_targets + 1e-16)` and precision
//! `tpc / (tpc + fpc)`; AP at each IoU threshold integrates the precision envelope (a running
//! maximum from the right) at 101 recall points with the trapezoid rule. Precision and recall
//! are also sampled at 1000 confidences in [0, 1]; P, R and F1 are read at the confidence that
//! maximizes the box-filtered (`smooth(.., 0.1)`) class-mean F1.
//!
//! **Equal confidences.** NumPy's `argsort(-conf)` is a quicksort, so predictions with equal
//! confidence come out in an order NumPy does not define, and that order moves the curves.
//! `ap_per_class` uses a stable sort (ties keep their input order);
//! `ap_per_class_in_order` takes the order from the caller, e.g. the one NumPy produced.

use super::matching::NIOU;
use super::numeric::{argmax, interp_many, linspace, smooth, trapezoid};

/// ultralytics' `eps` in `ap_per_class`.
const EPS: f64 = 1e-16;
/// Points of the confidence curves.
const CURVE_POINTS: usize = 1000;

/// What the validator accumulates over a dataset, one entry per prediction (`tp`, `conf`,
/// `pred_cls`) or per target (`target_cls`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DetectionStats {
    pub tp: Vec<[bool; NIOU]>,
    pub conf: Vec<f32>,
    pub pred_cls: Vec<usize>,
    pub target_cls: Vec<usize>,
}

/// `ap_per_class`'s results; per-class vectors follow `classes` (the target classes, ascending).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ApPerClass {
    pub tp: Vec<f64>,
    pub fp: Vec<f64>,
    pub p: Vec<f64>,
    pub r: Vec<f64>,
    pub f1: Vec<f64>,
    pub ap: Vec<[f64; NIOU]>,
    pub classes: Vec<usize>,
    /// Precision, recall and F1 against confidence, one row of `CURVE_POINTS` per class.
    pub p_curve: Vec<Vec<f64>>,
    pub r_curve: Vec<Vec<f64>>,
    pub f1_curve: Vec<Vec<f64>>,
    /// The confidences of the curves, `linspace(0, 1, 1000)`.
    pub x: Vec<f64>,
    /// The curve index where P, R and F1 were read.
    pub best_index: usize,
}

/// `ap_per_class` with a stable descending sort by confidence.
pub fn ap_per_class(stats: &DetectionStats) -> ApPerClass {
    ap_per_class_in_order(stats, &stable_order(&stats.conf))
}

/// Indices by descending confidence, ties in index order.
pub fn stable_order(conf: &[f32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..conf.len()).collect();
    order.sort_by(|&a, &b| {
        conf[b]
            .partial_cmp(&conf[a])
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    order
}

/// `ap_per_class` visiting predictions in `order` (descending confidence). Indices out of
/// range are skipped.
pub fn ap_per_class_in_order(stats: &DetectionStats, order: &[usize]) -> ApPerClass {
    let n = stats
        .tp
        .len()
        .min(stats.conf.len())
        .min(stats.pred_cls.len());
    let order: Vec<usize> = order.iter().copied().filter(|&i| i < n).collect();
    let (classes, counts) = unique_counts(&stats.target_cls);
    let x = linspace(0.0, 1.0, CURVE_POINTS);
    let neg_x: Vec<f64> = x.iter().map(|v| -v).collect();
    let nc = classes.len();
    let mut out = ApPerClass {
        ap: vec![[0.0; NIOU]; nc],
        p_curve: vec![vec![0.0; CURVE_POINTS]; nc],
        r_curve: vec![vec![0.0; CURVE_POINTS]; nc],
        ..ApPerClass::default()
    };
    for (ci, (&class, &n_targets)) in classes.iter().zip(&counts).enumerate() {
        let picked: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| stats.pred_cls[i] == class)
            .collect();
        if picked.is_empty() || n_targets == 0 {
            continue;
        }
        let curves = PrCurves::new(stats, &picked, n_targets);
        let neg_conf: Vec<f64> = picked.iter().map(|&i| -f64::from(stats.conf[i])).collect();
        let recall0 = curves.column(&curves.recall, 0);
        let precision0 = curves.column(&curves.precision, 0);
        let last = picked.len() - 1;
        out.r_curve[ci] = interp_many(&neg_x, &neg_conf, &recall0, 0.0, recall0[last]);
        out.p_curve[ci] = interp_many(&neg_x, &neg_conf, &precision0, 1.0, precision0[last]);
        for k in 0..NIOU {
            let recall = curves.column(&curves.recall, k);
            let precision = curves.column(&curves.precision, k);
            out.ap[ci][k] = compute_ap(&recall, &precision);
        }
    }
    out.f1_curve = out
        .p_curve
        .iter()
        .zip(&out.r_curve)
        .map(|(p, r)| {
            p.iter()
                .zip(r)
                .map(|(&p, &r)| 2.0 * p * r / (p + r + EPS))
                .collect()
        })
        .collect();
    out.best_index = if nc > 0 {
        argmax(&smooth(&class_mean(&out.f1_curve, CURVE_POINTS), 0.1))
    } else {
        0
    };
    let i = out.best_index;
    for (ci, &count) in counts.iter().enumerate().take(nc) {
        let (p, r) = (out.p_curve[ci][i], out.r_curve[ci][i]);
        let tp = (r * count as f64).round_ties_even();
        out.p.push(p);
        out.r.push(r);
        out.f1.push(out.f1_curve[ci][i]);
        out.tp.push(tp);
        out.fp.push((tp / (p + EPS) - tp).round_ties_even());
    }
    out.classes = classes;
    out.x = x;
    out
}

/// `compute_ap`: the area under the precision envelope, sampled at 101 recall points.
pub fn compute_ap(recall: &[f64], precision: &[f64]) -> f64 {
    let last_recall = recall.last().copied().unwrap_or(1.0);
    let mut mrec = Vec::with_capacity(recall.len() + 3);
    mrec.push(0.0);
    mrec.extend_from_slice(recall);
    mrec.extend([last_recall, 1.0]);
    let mut mpre = Vec::with_capacity(precision.len() + 3);
    mpre.push(1.0);
    mpre.extend_from_slice(precision);
    mpre.extend([0.0, 0.0]);
    // The envelope: each precision becomes the largest at or after it (NaN propagates, as in
    // `np.maximum.accumulate`).
    for i in (0..mpre.len() - 1).rev() {
        let (here, after) = (mpre[i], mpre[i + 1]);
        if after.is_nan() || after > here {
            mpre[i] = after;
        }
    }
    let ap_x = linspace(0.0, 1.0, 101);
    let (first, last) = (mpre[0], mpre[mpre.len() - 1]);
    let sampled = interp_many(&ap_x, &mrec, &mpre, first, last);
    trapezoid(&sampled, &ap_x)
}

/// Recall and precision after each prediction of one class, `[n_picked][NIOU]`.
struct PrCurves {
    recall: Vec<[f64; NIOU]>,
    precision: Vec<[f64; NIOU]>,
}

impl PrCurves {
    fn new(stats: &DetectionStats, picked: &[usize], n_targets: usize) -> PrCurves {
        let mut tpc = [0u64; NIOU];
        let mut recall = Vec::with_capacity(picked.len());
        let mut precision = Vec::with_capacity(picked.len());
        for (seen, &i) in picked.iter().enumerate() {
            for (k, c) in tpc.iter_mut().enumerate() {
                *c += u64::from(stats.tp[i][k]);
            }
            let fpc: [u64; NIOU] = std::array::from_fn(|k| (seen as u64 + 1) - tpc[k]);
            recall.push(std::array::from_fn(|k| {
                tpc[k] as f64 / (n_targets as f64 + EPS)
            }));
            precision.push(std::array::from_fn(|k| {
                tpc[k] as f64 / (tpc[k] + fpc[k]) as f64
            }));
        }
        PrCurves { recall, precision }
    }

    fn column(&self, rows: &[[f64; NIOU]], k: usize) -> Vec<f64> {
        rows.iter().map(|r| r[k]).collect()
    }
}

/// `np.unique(target_cls, return_counts=True)`.
fn unique_counts(classes: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut sorted = classes.to_vec();
    sorted.sort_unstable();
    let mut unique: Vec<usize> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    for c in sorted {
        if unique.last() == Some(&c) {
            if let Some(n) = counts.last_mut() {
                *n += 1;
            }
        } else {
            unique.push(c);
            counts.push(1);
        }
    }
    (unique, counts)
}

/// `curves.mean(0)` over rows of `len` points: NumPy adds the rows one after another, then
/// divides (NaN without rows).
pub(super) fn class_mean(rows: &[Vec<f64>], len: usize) -> Vec<f64> {
    let mut acc = vec![0.0; len];
    for row in rows {
        for (a, v) in acc.iter_mut().zip(row) {
            *a += v;
        }
    }
    let n = rows.len() as f64;
    acc.iter().map(|a| a / n).collect()
}

#[cfg(test)]
#[path = "ap_tests.rs"]
mod tests;

impl ApPerClass {
    /// Precision against recall per class, resampled at `points` recalls in [0, 1] (the
    /// data of ultralytics' PR curve): each class's curve runs over the confidence thresholds,
    /// so recall rises as confidence falls.
    pub fn pr_curves(&self, points: usize) -> (Vec<f64>, Vec<Vec<f64>>) {
        let grid = super::numeric::linspace(0.0, 1.0, points.max(2));
        let curves = self
            .p_curve
            .iter()
            .zip(&self.r_curve)
            .map(|(p, r)| {
                let (mut rs, mut ps): (Vec<f64>, Vec<f64>) = (r.clone(), p.clone());
                rs.reverse();
                ps.reverse();
                super::numeric::interp_many(&grid, &rs, &ps, 1.0, 0.0)
            })
            .collect();
        (grid, curves)
    }
}
