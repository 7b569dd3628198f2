//! Line charts: one or several named series, optionally smoothed.

use std::path::PathBuf;

use plotters::prelude::*;

use super::canvas::{bounds, color, render, Body, Chart};
use super::{PlotError, PlotOptions};

/// Draws each `(name, ys)` series against its index and writes the PNG; returns its path.
/// Non-finite values are skipped and break the line. Several series get a legend.
pub fn line(series: &[(String, Vec<f64>)], opts: &PlotOptions) -> Result<PathBuf, PlotError> {
    line_impl(None, series, opts)
}

/// Like [`line`], with explicit x values shared by every series.
pub fn line_xy(
    xs: &[f64],
    series: &[(String, Vec<f64>)],
    opts: &PlotOptions,
) -> Result<PathBuf, PlotError> {
    line_impl(Some(xs), series, opts)
}

/// One series ready to draw: finite runs of points, and the smoothed curve if asked for.
struct Trace {
    name: String,
    segments: Vec<Vec<(f64, f64)>>,
    smoothed: Option<Vec<(f64, f64)>>,
}

struct Lines {
    traces: Vec<Trace>,
}

fn line_impl(
    xs: Option<&[f64]>,
    series: &[(String, Vec<f64>)],
    opts: &PlotOptions,
) -> Result<PathBuf, PlotError> {
    if series.is_empty() {
        return Err(PlotError::Invalid(
            "line plot needs at least one series".into(),
        ));
    }
    let traces = series
        .iter()
        .map(|(name, ys)| trace(name, xs, ys, opts))
        .collect::<Result<Vec<_>, _>>()?;
    let points = || traces.iter().flat_map(|t| t.segments.iter().flatten());
    // Both bounds exist: `trace` rejects a series without finite points.
    let x = bounds(points().map(|p| p.0)).unwrap_or(0.0..1.0);
    let y = bounds(points().map(|p| p.1)).unwrap_or(0.0..1.0);
    render(opts, x, y, &Lines { traces })
}

fn trace(
    name: &str,
    xs: Option<&[f64]>,
    ys: &[f64],
    opts: &PlotOptions,
) -> Result<Trace, PlotError> {
    let what = format!("series '{name}'");
    if let Some(xs) = xs {
        if xs.len() != ys.len() {
            return Err(PlotError::Invalid(format!(
                "{what} has {} values but xs has {}",
                ys.len(),
                xs.len()
            )));
        }
    }
    let mut segments = vec![Vec::new()];
    for (i, &y) in ys.iter().enumerate() {
        let x = xs.map_or(i as f64, |xs| xs[i]);
        if opts.log_y && y.is_finite() && y <= 0.0 {
            return Err(PlotError::NonPositiveLog {
                what,
                index: i,
                value: y,
            });
        }
        if x.is_finite() && y.is_finite() {
            if let Some(segment) = segments.last_mut() {
                segment.push((x, y));
            }
        } else if segments.last().is_some_and(|s| !s.is_empty()) {
            segments.push(Vec::new());
        }
    }
    segments.retain(|s| !s.is_empty());
    if segments.is_empty() {
        return Err(PlotError::Empty { what });
    }
    let smoothed = opts
        .smooth
        .map(|w| moving_average(segments.iter().flatten(), w));
    Ok(Trace {
        name: name.to_string(),
        segments,
        smoothed,
    })
}

/// Exponential moving average with weight `w` on the past (TensorBoard's "smoothing"),
/// debiased so the start is not pulled toward zero.
fn moving_average<'a>(points: impl Iterator<Item = &'a (f64, f64)>, w: f64) -> Vec<(f64, f64)> {
    let mut average = 0.0;
    let mut weight = 0.0;
    points
        .map(|&(x, y)| {
            average = w * average + (1.0 - w) * y;
            weight = w * weight + (1.0 - w);
            (x, average / weight)
        })
        .collect()
}

impl Body for Lines {
    fn draw<DB, Y>(&self, chart: &mut Chart<'_, DB, Y>) -> Result<(), String>
    where
        DB: DrawingBackend,
        Y: Ranged<ValueType = f64>,
    {
        for (i, trace) in self.traces.iter().enumerate() {
            let c = color(i);
            // With smoothing the raw data is a faint backdrop and the average carries the label.
            let raw_style = if trace.smoothed.is_some() {
                c.mix(0.25).stroke_width(1)
            } else {
                c.stroke_width(2)
            };
            for (k, segment) in trace.segments.iter().enumerate() {
                let anno = if segment.len() == 1 {
                    chart.draw_series(
                        segment
                            .iter()
                            .map(|&p| Circle::new(p, 2, raw_style.filled())),
                    )
                } else {
                    chart.draw_series(LineSeries::new(segment.iter().copied(), raw_style))
                }
                .map_err(|e| e.to_string())?;
                if k == 0 && trace.smoothed.is_none() {
                    anno.label(trace.name.as_str())
                        .legend(move |(x, y)| legend_mark(x, y, c));
                }
            }
            if let Some(smoothed) = &trace.smoothed {
                chart
                    .draw_series(LineSeries::new(smoothed.iter().copied(), c.stroke_width(2)))
                    .map_err(|e| e.to_string())?
                    .label(trace.name.as_str())
                    .legend(move |(x, y)| legend_mark(x, y, c));
            }
        }
        Ok(())
    }

    fn has_legend(&self) -> bool {
        self.traces.len() > 1
    }

    fn points(&self) -> Vec<(f64, f64)> {
        let t = self.traces.iter();
        t.flat_map(|t| t.segments.iter().flatten().copied())
            .collect()
    }
}

fn legend_mark(x: i32, y: i32, c: RGBColor) -> PathElement<(i32, i32)> {
    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
}
