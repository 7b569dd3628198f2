//! The dataset-level detection summary of ultralytics' `DetMetrics` / `Metric`: per-image
//! statistics accumulate, `process` runs `ap_per_class` once, and the means, per-class results,
//! per-class mAPs and fitness are read from that.
//!
//! Means use NumPy's pairwise summation (`numeric::mean`); `map` averages the flattened
//! `[classes, 10]` AP array, as `all_ap.mean()` does. Fitness is ultralytics 8.4.190's
//! `0·P + 0·R + 0·mAP50 + 1·mAP50-95` with NaN read as 0.

use super::ap::{self, ApPerClass, DetectionStats};
use super::matching::NIOU;
use super::numeric::{mean, sum};

/// One image's contribution, as the validator's `update_metrics` builds it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImageStats {
    pub tp: Vec<[bool; NIOU]>,
    pub conf: Vec<f32>,
    pub pred_cls: Vec<usize>,
    pub target_cls: Vec<usize>,
}

/// Accumulated statistics and, after `process`, the results.
#[derive(Clone, Debug, Default)]
pub struct DetMetrics {
    /// Class names by class id; their count is the model's class count.
    pub names: Vec<String>,
    pub stats: DetectionStats,
    /// Each image's distinct target classes, concatenated (`target_img`).
    target_img: Vec<usize>,
    /// Images seen.
    pub seen: usize,
    /// `ap_per_class`'s output, after `process`.
    pub results: ApPerClass,
    /// Targets per class, and images containing each class (at least `names.len()` long).
    pub nt_per_class: Vec<usize>,
    pub nt_per_image: Vec<usize>,
}

impl DetMetrics {
    pub fn new(names: Vec<String>) -> DetMetrics {
        DetMetrics {
            names,
            ..DetMetrics::default()
        }
    }

    /// Adds one image's predictions and targets.
    pub fn update(&mut self, image: ImageStats) {
        self.seen += 1;
        let mut distinct = image.target_cls.clone();
        distinct.sort_unstable();
        distinct.dedup();
        self.target_img.extend(distinct);
        self.stats.tp.extend(image.tp);
        self.stats.conf.extend(image.conf);
        self.stats.pred_cls.extend(image.pred_cls);
        self.stats.target_cls.extend(image.target_cls);
    }

    /// Computes the results from everything accumulated so far (predictions of equal
    /// confidence in accumulation order; see `ap.rs`).
    pub fn process(&mut self) {
        let order = ap::stable_order(&self.stats.conf);
        self.process_in_order(&order);
    }

    /// `process` visiting predictions in `order` (descending confidence), e.g. the order
    /// NumPy's `argsort(-conf)` chose.
    pub fn process_in_order(&mut self, order: &[usize]) {
        self.results = ap::ap_per_class_in_order(&self.stats, order);
        self.nt_per_class = bincount(&self.stats.target_cls, self.names.len());
        self.nt_per_image = bincount(&self.target_img, self.names.len());
    }

    /// Per-class AP50-95: the mean of each class's ten APs.
    pub fn ap(&self) -> Vec<f64> {
        self.results.ap.iter().map(|row| mean(row)).collect()
    }

    /// Per-class AP50.
    pub fn ap50(&self) -> Vec<f64> {
        self.results.ap.iter().map(|row| row[0]).collect()
    }

    /// `[mean P, mean R, mAP50, mAP50-95]`, zeros before any class has results.
    pub fn mean_results(&self) -> [f64; 4] {
        let r = &self.results;
        if r.ap.is_empty() {
            return [0.0; 4];
        }
        let flat: Vec<f64> = r.ap.iter().flatten().copied().collect();
        [mean(&r.p), mean(&r.r), mean(&self.ap50()), mean(&flat)]
    }

    /// `[P, R, AP50, AP50-95]` of the `i`-th class with targets (see `ap_class_index`).
    pub fn class_result(&self, i: usize) -> Option<[f64; 4]> {
        let r = &self.results;
        let ap = r.ap.get(i)?;
        Some([*r.p.get(i)?, *r.r.get(i)?, ap[0], mean(ap)])
    }

    /// The class ids that have targets, in the order of the per-class results.
    pub fn ap_class_index(&self) -> &[usize] {
        &self.results.classes
    }

    /// mAP50-95 per class id; classes without targets get the overall mAP50-95.
    pub fn maps(&self) -> Vec<f64> {
        let overall = self.mean_results()[3];
        let mut maps = vec![overall; self.names.len()];
        for (c, ap) in self.results.classes.iter().zip(self.ap()) {
            if let Some(slot) = maps.get_mut(*c) {
                *slot = ap;
            }
        }
        maps
    }

    /// ultralytics' fitness: the weighted sum of the mean results with weights `[0, 0, 0, 1]`.
    pub fn fitness(&self) -> f64 {
        const WEIGHTS: [f64; 4] = [0.0, 0.0, 0.0, 1.0];
        let terms: Vec<f64> = self
            .mean_results()
            .iter()
            .zip(WEIGHTS)
            .map(|(&v, w)| nan_to_num(v) * w)
            .collect();
        sum(&terms)
    }
}

/// `np.bincount(values, minlength)`.
fn bincount(values: &[usize], minlength: usize) -> Vec<usize> {
    let len = values
        .iter()
        .map(|&v| v + 1)
        .max()
        .unwrap_or(0)
        .max(minlength);
    let mut counts = vec![0; len];
    for &v in values {
        counts[v] += 1;
    }
    counts
}

/// `np.nan_to_num`: NaN to 0, infinities to the largest finite values.
fn nan_to_num(v: f64) -> f64 {
    if v.is_nan() {
        0.0
    } else if v == f64::INFINITY {
        f64::MAX
    } else if v == f64::NEG_INFINITY {
        f64::MIN
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i}")).collect()
    }

    #[test]
    fn counts_targets_per_class_and_images_per_class() {
        let mut m = DetMetrics::new(names(3));
        m.update(ImageStats {
            target_cls: vec![0, 0, 2],
            ..ImageStats::default()
        });
        m.update(ImageStats {
            target_cls: vec![0],
            ..ImageStats::default()
        });
        m.process();
        assert_eq!(m.seen, 2);
        assert_eq!(m.nt_per_class, vec![3, 0, 1]);
        assert_eq!(m.nt_per_image, vec![2, 0, 1]);
    }

    #[test]
    fn a_perfect_detector_scores_0995_and_fitness_is_map50_95() {
        let mut m = DetMetrics::new(names(2));
        m.update(ImageStats {
            tp: vec![[true; NIOU], [true; NIOU]],
            conf: vec![0.9, 0.8],
            pred_cls: vec![0, 1],
            target_cls: vec![0, 1],
        });
        m.process();
        let [p, r, map50, map] = m.mean_results();
        assert!((p - 1.0).abs() < 1e-12 && (r - 1.0).abs() < 1e-12);
        assert!((map50 - 0.995).abs() < 1e-12 && (map - 0.995).abs() < 1e-12);
        assert_eq!(m.fitness(), map);
        assert_eq!(m.class_result(1).map(|c| c[2]), Some(map50));
    }

    #[test]
    fn maps_fill_classes_without_targets_with_the_overall_map() {
        let mut m = DetMetrics::new(names(3));
        m.update(ImageStats {
            tp: vec![[true; NIOU], [false; NIOU]],
            conf: vec![0.9, 0.8],
            pred_cls: vec![0, 2],
            target_cls: vec![0, 2],
        });
        m.process();
        let maps = m.maps();
        assert!((maps[0] - 0.995).abs() < 1e-12);
        assert_eq!(maps[2], 0.0);
        assert_eq!(maps[1], m.mean_results()[3]);
    }
}
