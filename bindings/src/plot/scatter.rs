//! Scatter charts, optionally colored by a class label per point.

use std::path::PathBuf;

use plotters::prelude::*;

use super::canvas::{bounds, color, render, Body, Chart};
use super::{PlotError, PlotOptions};

/// Draws the points `(xs[i], ys[i])` and writes the PNG; returns its path. With `labels`
/// (one per point) each class gets its own color and a legend entry, in first-seen order.
/// Points with a non-finite coordinate are skipped.
pub fn scatter(
    xs: &[f64],
    ys: &[f64],
    labels: Option<&[String]>,
    opts: &PlotOptions,
) -> Result<PathBuf, PlotError> {
    if xs.len() != ys.len() {
        return Err(PlotError::Invalid(format!(
            "scatter needs as many xs as ys, got {} and {}",
            xs.len(),
            ys.len()
        )));
    }
    if let Some(labels) = labels.filter(|l| l.len() != xs.len()) {
        return Err(PlotError::Invalid(format!(
            "scatter needs one label per point, got {} labels for {} points",
            labels.len(),
            xs.len()
        )));
    }
    let mut classes: Vec<Class> = Vec::new();
    for (i, (&x, &y)) in xs.iter().zip(ys).enumerate() {
        if opts.log_y && y.is_finite() && y <= 0.0 {
            let what = "the scatter ys".to_string();
            return Err(PlotError::NonPositiveLog {
                what,
                index: i,
                value: y,
            });
        }
        if !(x.is_finite() && y.is_finite()) {
            continue;
        }
        let name = labels.map_or("", |l| l[i].as_str());
        match classes.iter_mut().find(|c| c.name == name) {
            Some(class) => class.points.push((x, y)),
            None => classes.push(Class {
                name: name.to_string(),
                points: vec![(x, y)],
            }),
        }
    }
    let points = || classes.iter().flat_map(|c| c.points.iter());
    let (Some(x), Some(y)) = (bounds(points().map(|p| p.0)), bounds(points().map(|p| p.1))) else {
        return Err(PlotError::Empty {
            what: "the scatter input".into(),
        });
    };
    let legend = labels.is_some();
    render(opts, x, y, &Points { classes, legend })
}

struct Class {
    name: String,
    points: Vec<(f64, f64)>,
}

struct Points {
    classes: Vec<Class>,
    legend: bool,
}

impl Body for Points {
    fn draw<DB, Y>(&self, chart: &mut Chart<'_, DB, Y>) -> Result<(), String>
    where
        DB: DrawingBackend,
        Y: Ranged<ValueType = f64>,
    {
        for (i, class) in self.classes.iter().enumerate() {
            let style = color(i).mix(0.8).filled();
            let anno = chart
                .draw_series(class.points.iter().map(|&p| Circle::new(p, 3, style)))
                .map_err(|e| e.to_string())?;
            if self.legend {
                anno.label(class.name.as_str())
                    .legend(move |(x, y)| Circle::new((x + 10, y), 4, style));
            }
        }
        Ok(())
    }

    fn has_legend(&self) -> bool {
        self.legend
    }
}
