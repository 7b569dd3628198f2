//! Histograms of a list of values.

use std::path::PathBuf;

use plotters::prelude::*;

use super::canvas::{bounds, color, render, Body, Chart};
use super::{PlotError, PlotOptions};

/// Bin count used when the caller does not choose one.
pub const DEFAULT_BINS: usize = 30;

/// Counts the finite `values` into `bins` equal-width bins and writes the PNG; returns its
/// path. With `log_y` the counts are on a log axis and empty bins are left blank.
pub fn hist(values: &[f64], bins: usize, opts: &PlotOptions) -> Result<PathBuf, PlotError> {
    if !(1..=10_000).contains(&bins) {
        return Err(PlotError::Invalid(format!(
            "bins must be between 1 and 10000, got {bins}"
        )));
    }
    let finite = || values.iter().copied().filter(|v| v.is_finite());
    let Some(range) = bounds(finite()) else {
        return Err(PlotError::Empty {
            what: "the histogram input".into(),
        });
    };
    // A single distinct value still gets a bin of visible width.
    let (lo, hi) = if range.end > range.start {
        (range.start, range.end)
    } else {
        (range.start - 0.5, range.end + 0.5)
    };
    let width = (hi - lo) / bins as f64;
    let mut counts = vec![0usize; bins];
    for v in finite() {
        let bin = (((v - lo) / width) as usize).min(bins - 1);
        counts[bin] += 1;
    }
    let max = counts.iter().copied().max().unwrap_or(1) as f64;
    // On a log axis the bars start at 0.5, below the smallest non-empty count.
    let floor = if opts.log_y { 0.5 } else { 0.0 };
    let bars = Bars {
        lo,
        width,
        counts,
        floor,
    };
    render(opts, lo..hi, floor..max, &bars)
}

struct Bars {
    lo: f64,
    width: f64,
    counts: Vec<usize>,
    floor: f64,
}

impl Body for Bars {
    fn draw<DB, Y>(&self, chart: &mut Chart<'_, DB, Y>) -> Result<(), String>
    where
        DB: DrawingBackend,
        Y: Ranged<ValueType = f64>,
    {
        let fill = color(0).mix(0.75).filled();
        let bars = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| {
                let x0 = self.lo + i as f64 * self.width;
                Rectangle::new([(x0, self.floor), (x0 + self.width, n as f64)], fill)
            });
        chart.draw_series(bars).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn has_legend(&self) -> bool {
        false
    }
}
