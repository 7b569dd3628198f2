//! The frame every chart shares: embedded font, output file, axes, mesh and legend.
//! Each chart kind only supplies a [`Body`] that draws its series into the frame.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::OnceLock;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::{record_written, PlotError, PlotOptions};

/// Colors for successive series and classes (the matplotlib "tab10" cycle).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

pub(crate) fn color(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// The chart type a body draws into: f64 x axis, linear or logarithmic y axis.
pub(crate) type Chart<'a, DB, Y> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>;

/// The series of one chart kind.
pub(crate) trait Body {
    /// Draws the series; labelled series show up in the legend.
    fn draw<DB, Y>(&self, chart: &mut Chart<'_, DB, Y>) -> Result<(), String>
    where
        DB: DrawingBackend,
        Y: Ranged<ValueType = f64>;

    /// Whether the series carry labels worth a legend box.
    fn has_legend(&self) -> bool;

    /// Names of the whole-number positions 0, 1, ... of the x and y axes, shown instead of
    /// numeric ticks (a heatmap's classes).
    fn tick_names(&self) -> Option<(&[String], &[String])> {
        None
    }

    /// The data points, for placing the legend where it hides the fewest of them.
    fn points(&self) -> Vec<(f64, f64)> {
        Vec::new()
    }
}

/// The corner of the plot whose quarter (a box of a third of each axis) holds the fewest of
/// `points` (on the axes' scales: `log_y` compares logarithms); the upper right on a tie.
pub(crate) fn emptiest_corner(
    points: &[(f64, f64)],
    x: &Range<f64>,
    y: &Range<f64>,
    log_y: bool,
) -> SeriesLabelPosition {
    let scale = |v: f64| {
        if log_y {
            v.max(f64::MIN_POSITIVE).ln()
        } else {
            v
        }
    };
    let (y0, y1) = (scale(y.start), scale(y.end));
    let frac = |v: f64, lo: f64, hi: f64| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    let corners = [
        (SeriesLabelPosition::UpperRight, true, true),
        (SeriesLabelPosition::UpperLeft, false, true),
        (SeriesLabelPosition::LowerRight, true, false),
        (SeriesLabelPosition::LowerLeft, false, false),
    ];
    let hidden = |right: bool, upper: bool| {
        points
            .iter()
            .filter(|&&(px, py)| {
                let (fx, fy) = (frac(px, x.start, x.end), frac(scale(py), y0, y1));
                (if right {
                    fx >= 2.0 / 3.0
                } else {
                    fx <= 1.0 / 3.0
                }) && (if upper {
                    fy >= 2.0 / 3.0
                } else {
                    fy <= 1.0 / 3.0
                })
            })
            .count()
    };
    corners
        .into_iter()
        .min_by_key(|&(_, right, upper)| hidden(right, upper))
        .map_or(SeriesLabelPosition::UpperRight, |(p, _, _)| p)
}

/// The title's font size: 24 pixels, smaller for a title too long for the width (about 0.55
/// of the size per character in the embedded sans-serif), never below 11.
pub(crate) fn title_size(title: &str, width: u32) -> u32 {
    let chars = title.chars().count().max(1) as f64;
    let fits = (width.saturating_sub(32) as f64 / (0.55 * chars)).floor() as u32;
    fits.clamp(11, 24)
}

/// Pixels left of the plot for the y tick labels and the axis name: wide enough for the
/// longest class name, so a name like "versicolor" does not run into the axis name.
fn y_label_area(opts: &PlotOptions, body: &impl Body) -> u32 {
    let ticks = body
        .tick_names()
        .and_then(|(_, ys)| ys.iter().map(|s| s.chars().count()).max())
        .map_or(40, |chars| 16 + 8 * chars as u32)
        .max(40);
    ticks + if opts.ylabel.is_some() { 32 } else { 16 }
}

/// Draws `body` over the given data ranges and writes the PNG at `opts.path`.
pub(crate) fn render(
    opts: &PlotOptions,
    x: Range<f64>,
    y: Range<f64>,
    body: &impl Body,
) -> Result<PathBuf, PlotError> {
    opts.validate()?;
    register_embedded_font()?;
    if let Some(parent) = opts.path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| PlotError::Io {
            path: opts.path.clone(),
            source,
        })?;
    }
    let draw_error = |message: String| PlotError::Draw {
        path: opts.path.clone(),
        message,
    };
    let root = BitMapBackend::new(&opts.path, (opts.width, opts.height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(e.to_string()))?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .margin(16)
        .x_label_area_size(if opts.xlabel.is_some() { 48 } else { 32 })
        .y_label_area_size(y_label_area(opts, body));
    if let Some(title) = &opts.title {
        builder.caption(title, ("sans-serif", title_size(title, opts.width)));
    }
    let x = padded(x, false);
    let y = padded(y, opts.log_y);
    let corner = emptiest_corner(&body.points(), &x, &y, opts.log_y);
    let drawn = if opts.log_y {
        let chart = builder.build_cartesian_2d(x, y.log_scale());
        chart
            .map_err(|e| e.to_string())
            .and_then(|mut c| finish(&mut c, opts, body, corner))
    } else {
        let chart = builder.build_cartesian_2d(x, y);
        chart
            .map_err(|e| e.to_string())
            .and_then(|mut c| finish(&mut c, opts, body, corner))
    };
    drawn.map_err(draw_error)?;
    root.present().map_err(|e| draw_error(e.to_string()))?;
    record_written(&opts.path);
    Ok(opts.path.clone())
}

/// Mesh, series and legend: everything that depends on the y axis type.
fn finish<'a, DB, Y>(
    chart: &mut Chart<'a, DB, Y>,
    opts: &PlotOptions,
    body: &impl Body,
    legend_corner: SeriesLabelPosition,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let names = body.tick_names();
    let x_names = names.map(|(x, _)| x);
    let y_names = names.map(|(_, y)| y);
    let x_format = |v: &f64| x_names.map_or_else(|| tick_label(*v), |n| name_at(n, *v));
    let y_format = |v: &f64| y_names.map_or_else(|| tick_label(*v), |n| name_at(n, *v));
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(RGBColor(235, 235, 235))
        .label_style(("sans-serif", 14))
        .x_label_formatter(&x_format)
        .y_label_formatter(&y_format);
    if let Some((x, y)) = names {
        // Room for a tick at every whole number, and no finer: half steps would need more.
        mesh.x_labels(x.len() + 2).y_labels(y.len() + 2);
    }
    if opts.log_y {
        // plotters' log axis puts a tick at every integer multiple; thin them out.
        mesh.y_labels(8).y_max_light_lines(1);
    }
    if let Some(xlabel) = &opts.xlabel {
        mesh.x_desc(xlabel);
    }
    if let Some(ylabel) = &opts.ylabel {
        mesh.y_desc(ylabel);
    }
    mesh.draw().map_err(|e| e.to_string())?;
    body.draw(chart)?;
    if body.has_legend() {
        chart
            .configure_series_labels()
            .position(legend_corner)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A short tick label: up to four significant digits, no trailing zeros, exponent
/// notation for very large or small magnitudes (`0.5`, `250`, `1e-5`).
pub(crate) fn tick_label(v: f64) -> String {
    let magnitude = v.abs();
    if v == 0.0 {
        return "0".into();
    }
    if !(1e-3..1e6).contains(&magnitude) {
        let text = format!("{v:.3e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        return format!("{}e{exponent}", trim_zeros(mantissa));
    }
    let decimals = (3 - magnitude.log10().floor() as i32).max(0) as usize;
    trim_zeros(&format!("{v:.decimals$}")).to_string()
}

/// The name of a whole-number tick, and nothing between them or beyond the names.
fn name_at(names: &[String], v: f64) -> String {
    let i = v.round();
    if (v - i).abs() > 1e-6 || i < 0.0 {
        return String::new();
    }
    names.get(i as usize).cloned().unwrap_or_default()
}

fn trim_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// Widens a data range by 5% on each side (multiplicatively on a log axis) so that
/// points do not sit on the frame, and gives a flat range some height.
fn padded(range: Range<f64>, log: bool) -> Range<f64> {
    let (lo, hi) = (range.start, range.end);
    if log {
        if hi <= lo {
            return lo / 2.0..hi * 2.0;
        }
        let pad = ((hi / lo).ln() * 0.05).exp();
        return lo / pad..hi * pad;
    }
    if hi <= lo {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return lo - pad..hi + pad;
    }
    let pad = (hi - lo) * 0.05;
    lo - pad..hi + pad
}

/// The smallest and largest of the values (callers pass finite values only).
pub(crate) fn bounds(values: impl IntoIterator<Item = f64>) -> Option<Range<f64>> {
    values.into_iter().fold(None, |acc, v| match acc {
        None => Some(v..v),
        Some(r) => Some(r.start.min(v)..r.end.max(v)),
    })
}

/// Registers the embedded TTF as plotters' "sans-serif", so text never goes through
/// fontconfig: a fresh machine has no fonts installed.
fn register_embedded_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = REGISTERED.get_or_init(|| {
        let bytes = epaint_default_fonts::HACK_REGULAR;
        [FontStyle::Normal, FontStyle::Bold]
            .into_iter()
            .all(|style| plotters::style::register_font("sans-serif", style, bytes).is_ok())
    });
    if *ok {
        Ok(())
    } else {
        Err(PlotError::Invalid(
            "the embedded font failed to load".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body with named y ticks and nothing to draw.
    struct Named(Vec<String>, Vec<String>);

    impl Body for Named {
        fn draw<DB, Y>(&self, _chart: &mut Chart<'_, DB, Y>) -> Result<(), String>
        where
            DB: DrawingBackend,
            Y: Ranged<ValueType = f64>,
        {
            Ok(())
        }
        fn has_legend(&self) -> bool {
            false
        }
        fn tick_names(&self) -> Option<(&[String], &[String])> {
            Some((&self.0, &self.1))
        }
    }

    #[test]
    fn the_y_label_area_widens_for_long_class_names() {
        let opts = PlotOptions {
            ylabel: Some("True".into()),
            ..PlotOptions::default()
        };
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let short = y_label_area(&opts, &Named(vec![], names(&["a", "b"])));
        let long = y_label_area(&opts, &Named(vec![], names(&["a", "versicolor"])));
        assert_eq!(short, 72, "numeric-width default with an axis name");
        assert!(
            long >= 8 * 10 + 32,
            "room for 10 characters and the axis name: {long}"
        );
    }
}
