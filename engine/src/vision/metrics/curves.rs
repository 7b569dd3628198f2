//! The data of ultralytics' validation charts, so that drawing them is only drawing:
//! `PR_curve.png` (precision against recall per class, and their mean) and `F1_curve.png` (F1
//! against confidence per class, and their mean smoothed by `smooth(.., 0.1)`, with its peak),
//! as `plot_pr_curve` and `plot_mc_curve` compute them.

use super::ap::{class_mean, ApPerClass};
use super::numeric::{argmax, smooth};

/// One chart's lines: shared x values, a line per class (in `ApPerClass::classes` order) and
/// the class mean drawn bold, with the point where that mean peaks.
#[derive(Clone, Debug, PartialEq)]
pub struct CurveChart {
    pub x: Vec<f64>,
    pub per_class: Vec<Vec<f64>>,
    /// Empty when there are no classes.
    pub mean: Vec<f64>,
    /// `(x, mean)` at the mean's first maximum; `None` when there are no classes.
    pub peak: Option<(f64, f64)>,
}

impl CurveChart {
    fn new(x: Vec<f64>, per_class: Vec<Vec<f64>>, smoothing: Option<f64>) -> CurveChart {
        if per_class.is_empty() {
            return CurveChart {
                x,
                per_class,
                mean: Vec::new(),
                peak: None,
            };
        }
        let mean = class_mean(&per_class, x.len());
        let mean = match smoothing {
            Some(f) => smooth(&mean, f),
            None => mean,
        };
        let best = argmax(&mean);
        let peak = x.get(best).zip(mean.get(best)).map(|(&x, &y)| (x, y));
        CurveChart {
            x,
            per_class,
            mean,
            peak,
        }
    }
}

impl ApPerClass {
    /// Precision against recall at `points` recalls in [0, 1], per class and averaged over
    /// the classes (unsmoothed, as `plot_pr_curve` draws it).
    pub fn pr_chart(&self, points: usize) -> CurveChart {
        let (recall, precision) = self.pr_curves(points);
        CurveChart::new(recall, precision, None)
    }

    /// F1 against confidence per class, and the class mean smoothed by `smooth(.., 0.1)` (as
    /// `plot_mc_curve` draws it); its peak is the confidence the validator reads P and R at.
    pub fn f1_chart(&self) -> CurveChart {
        CurveChart::new(self.x.clone(), self.f1_curve.clone(), Some(0.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(f1: Vec<Vec<f64>>) -> ApPerClass {
        let n = f1.first().map_or(0, Vec::len);
        ApPerClass {
            x: (0..n).map(|i| i as f64 / (n - 1).max(1) as f64).collect(),
            f1_curve: f1,
            ..ApPerClass::default()
        }
    }

    #[test]
    fn f1_chart_mean_is_the_class_mean_with_its_first_peak() {
        let r = results(vec![vec![0.2; 1000], vec![0.6; 1000]]);
        let chart = r.f1_chart();
        assert_eq!(chart.per_class.len(), 2);
        assert_eq!(chart.mean.len(), 1000);
        assert!(chart.mean.iter().all(|&v| (v - 0.4).abs() < 1e-12));
        assert_eq!(chart.peak.map(|p| p.0), Some(0.0));
    }

    #[test]
    fn f1_chart_mean_is_smoothed_as_ultralytics_plots_it() {
        let mut spike = vec![0.0; 1000];
        spike[700] = 1.0;
        let chart = results(vec![spike.clone(), spike]).f1_chart();
        let (x, y) = chart.peak.unwrap();
        // smooth(.., 0.1) on 1000 points is a box of 101: the spike becomes 1/101 over the 101
        // outputs whose box holds it, the first of which (650) is the peak.
        assert!((y - 1.0 / 101.0).abs() < 1e-12, "{y}");
        assert!((x - 650.0 / 999.0).abs() < 1e-12, "{x}");
    }

    #[test]
    fn charts_without_classes_have_no_mean_and_no_peak() {
        let chart = results(Vec::new()).f1_chart();
        assert!(chart.mean.is_empty() && chart.peak.is_none());
        assert!(ApPerClass::default().pr_chart(10).mean.is_empty());
    }

    #[test]
    fn pr_chart_mean_is_the_plain_class_mean() {
        let r = ApPerClass {
            p_curve: vec![vec![1.0, 0.5], vec![0.5, 0.5]],
            r_curve: vec![vec![0.0, 1.0], vec![0.0, 1.0]],
            ..ApPerClass::default()
        };
        let chart = r.pr_chart(3);
        assert_eq!(chart.x, [0.0, 0.5, 1.0]);
        let expect: Vec<f64> = (0..3)
            .map(|i| (chart.per_class[0][i] + chart.per_class[1][i]) / 2.0)
            .collect();
        assert_eq!(chart.mean, expect);
    }
}
