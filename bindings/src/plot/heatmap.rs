//! Heatmaps: a matrix of values as shaded cells with their numbers (a confusion matrix), laid
//! out as a matrix is printed: row 0 at the top, column 0 at the left.

use std::path::PathBuf;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::canvas::{render, Body, Chart};
use super::{PlotError, PlotOptions};

/// Names of a heatmap's rows and columns (a confusion matrix's classes). An empty list shows
/// the indices.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AxisNames {
    pub rows: Vec<String>,
    pub columns: Vec<String>,
}

/// Draws `rows` (all the same length) as cells, shaded from white (0) to blue (the largest
/// value), each with its value. Cell (r, c) is centred on x = c and on the r-th tick from the
/// top, whose labels are `names` (or the indices). Writes the PNG and returns its path.
pub fn heatmap(
    rows: &[Vec<f64>],
    names: &AxisNames,
    opts: &PlotOptions,
) -> Result<PathBuf, PlotError> {
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
    let n = rows.len();
    let named = |given: &[String], len: usize, what: &str| {
        if given.is_empty() {
            Ok((0..len).map(|i| i.to_string()).collect())
        } else if given.len() == len {
            Ok(given.to_vec())
        } else {
            Err(PlotError::Invalid(format!(
                "{} {what} names for {len} {what}s",
                given.len()
            )))
        }
    };
    let column_names: Vec<String> = named(&names.columns, cols, "column")?;
    // The y axis counts upwards, so the top row's name is the last tick's.
    let mut y_names: Vec<String> = named(&names.rows, n, "row")?;
    y_names.reverse();
    let max = rows
        .iter()
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, &v| m.max(v));
    let cells = Cells {
        rows: rows.to_vec(),
        max,
        column_names,
        y_names,
    };
    render(opts, -0.5..cols as f64 - 0.5, -0.5..n as f64 - 0.5, &cells)
}

struct Cells {
    rows: Vec<Vec<f64>>,
    max: f64,
    column_names: Vec<String>,
    y_names: Vec<String>,
}

impl Body for Cells {
    fn draw<DB, Y>(&self, chart: &mut Chart<'_, DB, Y>) -> Result<(), String>
    where
        DB: DrawingBackend,
        Y: Ranged<ValueType = f64>,
    {
        let n = self.rows.len();
        for (r, row) in self.rows.iter().enumerate() {
            let y = (n - 1 - r) as f64;
            for (c, &v) in row.iter().enumerate() {
                let x = c as f64;
                let t = if self.max > 0.0 && v.is_finite() {
                    (v / self.max).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                let shade = |full: f64, light: f64| (light + (full - light) * t) as u8;
                let fill = RGBColor(shade(8.0, 255.0), shade(48.0, 255.0), shade(107.0, 255.0));
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)],
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
                    let style = ("sans-serif", 12)
                        .into_font()
                        .color(&ink)
                        .pos(Pos::new(HPos::Center, VPos::Center));
                    chart
                        .draw_series(std::iter::once(Text::new(text, (x, y), style)))
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(())
    }

    fn has_legend(&self) -> bool {
        false
    }

    fn tick_names(&self) -> Option<(&[String], &[String])> {
        Some((&self.column_names, &self.y_names))
    }
}
