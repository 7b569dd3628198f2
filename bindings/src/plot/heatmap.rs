//! Heatmaps: a matrix of values as shaded cells with their numbers (a confusion matrix).

use std::path::PathBuf;

use plotters::prelude::*;

use super::canvas::{render, Body, Chart};
use super::{PlotError, PlotOptions};

/// Draws `rows` (all the same length) as cells, shaded from white (0) to blue (the largest
/// value), each with its value; row r spans y in [r, r + 1] and column c spans x in [c, c + 1],
/// so the axis ticks are the indices. Writes the PNG and returns its path.
pub fn heatmap(rows: &[Vec<f64>], opts: &PlotOptions) -> Result<PathBuf, PlotError> {
    let cols = rows.first().map_or(0, |r| r.len());
    if rows.is_empty() || cols == 0 {
        return Err(PlotError::Empty {
            what: "the heatmap matrix".into(),
        });
    }
    if let Some(i) = rows.iter().position(|r| r.len() != cols) {
        return Err(PlotError::Invalid(format!(
            "heatmap rows must have one length: row 0 has {cols} values, row {i} has {}",
            rows[i].len()
        )));
    }
    let max = rows
        .iter()
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, &v| m.max(v));
    let cells = Cells {
        rows: rows.to_vec(),
        max,
    };
    render(opts, 0.0..cols as f64, 0.0..rows.len() as f64, &cells)
}

struct Cells {
    rows: Vec<Vec<f64>>,
    max: f64,
}

impl Body for Cells {
    fn draw<DB, Y>(&self, chart: &mut Chart<'_, DB, Y>) -> Result<(), String>
    where
        DB: DrawingBackend,
        Y: Ranged<ValueType = f64>,
    {
        for (r, row) in self.rows.iter().enumerate() {
            let y0 = r as f64;
            for (c, &v) in row.iter().enumerate() {
                let t = if self.max > 0.0 && v.is_finite() {
                    (v / self.max).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                let shade = |full: f64, light: f64| (light + (full - light) * t) as u8;
                let fill = RGBColor(shade(8.0, 255.0), shade(48.0, 255.0), shade(107.0, 255.0));
                let x0 = c as f64;
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x0, y0), (x0 + 1.0, y0 + 1.0)],
                        fill.filled(),
                    )))
                    .map_err(|e| e.to_string())?;
                if v != 0.0 {
                    let ink = if t > 0.5 { WHITE } else { BLACK };
                    let text = if v.fract() == 0.0 {
                        format!("{v:.0}")
                    } else {
                        format!("{v:.2}")
                    };
                    chart
                        .draw_series(std::iter::once(Text::new(
                            text,
                            (x0 + 0.3, y0 + 0.6),
                            ("sans-serif", 12).into_font().color(&ink),
                        )))
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(())
    }

    fn has_legend(&self) -> bool {
        false
    }
}
