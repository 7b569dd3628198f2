//! Charts are checked by decoding the written PNGs.

use std::fs::File;
use std::path::Path;

use plotters::style::RGBColor;
use rhai::{Dynamic, Engine};
use rusting_brain::Tensor;

use super::canvas::color;
use super::*;

/// Decoded RGB image: width, height and pixels row by row.
struct Image {
    width: u32,
    height: u32,
    rgb: Vec<[u8; 3]>,
}

impl Image {
    fn read(path: &Path) -> Image {
        let decoder = png::Decoder::new(File::open(path).expect("plot file exists"));
        let mut reader = decoder.read_info().expect("valid png header");
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).expect("valid png data");
        let channels = info.color_type.samples();
        let rgb = buf[..info.buffer_size()]
            .chunks(channels)
            .map(|p| [p[0], p[1], p[2]])
            .collect();
        Image {
            width: info.width,
            height: info.height,
            rgb,
        }
    }

    /// Pixels of exactly `c` inside the rectangle `x0..x1, y0..y1` (fractions of the size).
    fn count(&self, c: RGBColor, (x0, x1): (f64, f64), (y0, y1): (f64, f64)) -> usize {
        let (w, h) = (self.width as f64, self.height as f64);
        let mut n = 0;
        for y in (y0 * h) as u32..(y1 * h) as u32 {
            for x in (x0 * w) as u32..(x1 * w) as u32 {
                if self.rgb[(y * self.width + x) as usize] == [c.0, c.1, c.2] {
                    n += 1;
                }
            }
        }
        n
    }
}

fn options_in(dir: &Path, name: &str) -> PlotOptions {
    PlotOptions {
        path: dir.join(name),
        ..PlotOptions::default()
    }
}

fn series(name: &str, ys: &[f64]) -> (String, Vec<f64>) {
    (name.to_string(), ys.to_vec())
}

const WHOLE: (f64, f64) = (0.0, 1.0);

#[test]
fn line_plot_is_a_png_of_the_requested_size() {
    let dir = tempfile::tempdir().unwrap();
    let opts = PlotOptions {
        width: 640,
        height: 360,
        title: Some("loss".into()),
        xlabel: Some("step".into()),
        ylabel: Some("loss".into()),
        ..options_in(dir.path(), "loss.png")
    };
    let path = line(&[series("loss", &[3.0, 2.0, 1.5, 1.2, 1.1])], &opts).unwrap();
    let image = Image::read(&path);
    assert_eq!((image.width, image.height), (640, 360));
    assert!(
        image.count(color(0), WHOLE, WHOLE) > 100,
        "the line is drawn in the first color"
    );
}

#[test]
fn several_series_are_drawn_in_distinct_colors_with_a_legend() {
    let dir = tempfile::tempdir().unwrap();
    // Both series hug the bottom, so the upper right quarter holds only the legend.
    let a = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    let b = [1.0, 0.05, 0.05, 0.05, 0.05, 0.05];
    let opts = options_in(dir.path(), "two.png");
    let path = line(&[series("train", &a), series("val", &b)], &opts).unwrap();
    let image = Image::read(&path);
    let upper_right = ((0.5, 1.0), (0.0, 0.5));
    for i in 0..2 {
        let marks = image.count(color(i), upper_right.0, upper_right.1);
        assert!(
            marks > 10,
            "legend mark of series {i} missing ({marks} pixels)"
        );
    }
}

#[test]
fn a_single_series_has_no_legend() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options_in(dir.path(), "one.png");
    let path = line(&[series("loss", &[1.0, 0.0, 0.0, 0.0, 0.0])], &opts).unwrap();
    let image = Image::read(&path);
    assert_eq!(image.count(color(0), (0.6, 1.0), (0.0, 0.5)), 0);
}

#[test]
fn explicit_xs_must_match_the_series_length() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options_in(dir.path(), "xy.png");
    let s = [series("acc", &[0.1, 0.5, 0.9])];
    assert!(line_xy(&[0.0, 10.0, 20.0], &s, &opts).is_ok());
    let err = line_xy(&[0.0, 10.0], &s, &opts).unwrap_err().to_string();
    assert!(
        err.contains("series 'acc' has 3 values but xs has 2"),
        "{err}"
    );
}

#[test]
fn log_y_rejects_a_non_positive_value_naming_series_and_index() {
    let dir = tempfile::tempdir().unwrap();
    let opts = PlotOptions {
        log_y: true,
        ..options_in(dir.path(), "log.png")
    };
    let err = line(&[series("loss", &[1.0, 0.1, 0.0, 0.01])], &opts).unwrap_err();
    assert_eq!(
        err.to_string(),
        "log_y needs positive values, but series 'loss' has 0 at index 2"
    );
    assert!(!opts.path.exists(), "no file is written on error");
}

#[test]
fn log_y_accepts_positive_values_over_several_decades() {
    let dir = tempfile::tempdir().unwrap();
    let opts = PlotOptions {
        log_y: true,
        ..options_in(dir.path(), "log.png")
    };
    let ys: Vec<f64> = (0..50).map(|i| 10f64.powf(-(i as f64) / 10.0)).collect();
    assert!(line(&[series("loss", &ys)], &opts).is_ok());
}

#[test]
fn non_finite_values_are_skipped_and_all_non_finite_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options_in(dir.path(), "nan.png");
    let gappy = [1.0, f64::NAN, 0.5, f64::INFINITY, 0.2, 0.1];
    assert!(line(&[series("loss", &gappy)], &opts).is_ok());
    let err = line(&[series("loss", &[f64::NAN, f64::NAN])], &opts).unwrap_err();
    assert_eq!(
        err.to_string(),
        "series 'loss' has no finite values to plot"
    );
}

#[test]
fn empty_inputs_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options_in(dir.path(), "empty.png");
    let no_series = line(&[], &opts).unwrap_err().to_string();
    assert_eq!(no_series, "line plot needs at least one series");
    let empty = line(&[series("loss", &[])], &opts).unwrap_err().to_string();
    assert_eq!(empty, "series 'loss' has no finite values to plot");
    let hist_err = hist(&[], 10, &opts).unwrap_err().to_string();
    assert_eq!(hist_err, "the histogram input has no finite values to plot");
    let scatter_err = scatter(&[], &[], None, &opts).unwrap_err().to_string();
    assert_eq!(
        scatter_err,
        "the scatter input has no finite values to plot"
    );
}

#[test]
fn smoothing_weight_outside_zero_to_one_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let opts = PlotOptions {
        smooth: Some(1.5),
        ..options_in(dir.path(), "s.png")
    };
    let err = line(&[series("loss", &[1.0, 2.0])], &opts)
        .unwrap_err()
        .to_string();
    assert!(err.contains("smooth must be a weight in 0..1"), "{err}");
}

#[test]
fn smoothing_draws_the_raw_series_faint_under_the_average() {
    let dir = tempfile::tempdir().unwrap();
    let noisy: Vec<f64> = (0..200)
        .map(|i| if i % 2 == 0 { 1.0 } else { 0.0 })
        .collect();
    let opts = PlotOptions {
        smooth: Some(0.95),
        ..options_in(dir.path(), "smooth.png")
    };
    let image = Image::read(&line(&[series("loss", &noisy)], &opts).unwrap());
    // The average of a 0/1 zigzag sits near 0.5, in the middle band of the chart, drawn
    // in the full color; the raw zigzag reaching the top and bottom is blended toward white.
    // The left fifth is skipped: the average starts at the first value before settling.
    assert!(image.count(color(0), (0.2, 0.9), (0.4, 0.6)) > 100);
    assert_eq!(
        image.count(color(0), (0.2, 0.9), (0.0, 0.3)),
        0,
        "raw line is not faint"
    );
}

#[test]
fn scatter_labels_give_each_class_a_color() {
    let dir = tempfile::tempdir().unwrap();
    let xs = [0.0, 1.0, 2.0, 3.0];
    let ys = [0.0, 1.0, 0.0, 1.0];
    let labels: Vec<String> = ["cat", "dog", "cat", "dog"].map(String::from).to_vec();
    let opts = options_in(dir.path(), "scatter.png");
    let image = Image::read(&scatter(&xs, &ys, Some(&labels), &opts).unwrap());
    // Points are blended at 0.8 alpha; the legend marks are too, so look for any pixel
    // close to each class color by checking that the classes differ in the image.
    let reds = image
        .rgb
        .iter()
        .filter(|p| p[0] > 200 && p[1] > 100 && p[2] < 80)
        .count();
    let blues = image
        .rgb
        .iter()
        .filter(|p| p[2] > 150 && p[0] < 100)
        .count();
    assert!(
        reds > 20 && blues > 20,
        "orange {reds} and blue {blues} points"
    );
    let short = scatter(&xs, &ys, Some(&labels[..3]), &opts)
        .unwrap_err()
        .to_string();
    assert!(short.contains("3 labels for 4 points"), "{short}");
}

#[test]
fn hist_writes_a_png_and_rejects_zero_bins() {
    let dir = tempfile::tempdir().unwrap();
    let values: Vec<f64> = (0..1000).map(|i| ((i * 37) % 101) as f64).collect();
    let opts = PlotOptions {
        width: 300,
        height: 200,
        ..options_in(dir.path(), "h.png")
    };
    let image = Image::read(&hist(&values, 20, &opts).unwrap());
    assert_eq!((image.width, image.height), (300, 200));
    let err = hist(&values, 0, &opts).unwrap_err().to_string();
    assert_eq!(err, "bins must be between 1 and 10000, got 0");
    let log = PlotOptions {
        log_y: true,
        ..opts
    };
    assert!(
        hist(&[1.0, 1.0, 1.0, 100.0], 10, &log).is_ok(),
        "empty bins on a log axis"
    );
}

#[test]
fn parent_folders_are_created_and_the_path_is_recorded_once() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options_in(dir.path(), "nested/deeper/plot.png");
    let path = line(&[series("loss", &[1.0, 2.0])], &opts).unwrap();
    assert!(path.exists());
    assert!(drain_written_plots().contains(&path));
    assert!(
        !drain_written_plots().contains(&path),
        "drained paths are forgotten"
    );
}

#[test]
fn a_path_without_png_extension_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options_in(dir.path(), "plot.svg");
    let err = line(&[series("loss", &[1.0, 2.0])], &opts)
        .unwrap_err()
        .to_string();
    assert!(err.contains("must end in .png"), "{err}");
}

#[test]
fn tick_labels_are_short() {
    use super::canvas::tick_label;
    let cases = [
        (0.0, "0"),
        (50.0, "50"),
        (0.6000000000000001, "0.6"),
        (0.125, "0.125"),
    ];
    for (v, text) in cases
        .into_iter()
        .chain([(1e-5, "1e-5"), (2.5e7, "2.5e7"), (-3.0, "-3")])
    {
        assert_eq!(tick_label(v), text);
    }
}

fn engine() -> Engine {
    let mut engine = Engine::new();
    register(&mut engine);
    engine
}

fn script_error(engine: &Engine, script: &str) -> String {
    engine.run(script).unwrap_err().to_string()
}

#[test]
fn rhai_script_writes_the_plot_and_returns_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loss.png");
    let script = format!(
        r#"let losses = [3, 2.5, 2.0, 1.0]; plot::line(losses, #{{ title: "loss", path: "{}", width: 400, height: 300 }})"#,
        path.display()
    );
    let returned: String = engine().eval(&script).unwrap();
    assert_eq!(returned, path.display().to_string());
    let image = Image::read(&path);
    assert_eq!((image.width, image.height), (400, 300));
}

#[test]
fn rhai_series_map_scatter_and_hist_all_write_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).display().to_string();
    let script = format!(
        r#"
        plot::line(#{{ train: [3, 2, 1], val: [3.5, 2.5, 2.0] }}, #{{ path: "{}", log_y: true, smooth: 0.5 }});
        plot::line([1, 4, 9], #{{ xs: [1, 2, 3], path: "{}" }});
        plot::scatter([1, 2, 3], [3, 1, 2], #{{ labels: [0, 1, 0], path: "{}" }});
        plot::hist([1, 2, 2, 3, 3, 3], #{{ bins: 3, path: "{}" }});
        "#,
        p("map.png"),
        p("xy.png"),
        p("scatter.png"),
        p("hist.png")
    );
    engine().run(&script).unwrap();
    for name in ["map.png", "xy.png", "scatter.png", "hist.png"] {
        assert!(dir.path().join(name).exists(), "{name} was not written");
    }
}

#[test]
fn rhai_unknown_option_error_lists_the_valid_keys() {
    let err = script_error(&engine(), "plot::line([1, 2], #{ titel: \"x\" })");
    assert!(err.contains("plot::line: unknown option 'titel'"), "{err}");
    assert!(
        err.contains(
            "valid options are: title, xlabel, ylabel, path, width, height, log_y, smooth, xs"
        ),
        "{err}"
    );
    let err = script_error(&engine(), "plot::hist([1, 2], #{ smooth: 0.5 })");
    assert!(
        err.contains("unknown option 'smooth'") && err.contains("bins"),
        "{err}"
    );
}

#[test]
fn rhai_non_number_error_names_its_index() {
    let err = script_error(&engine(), r#"plot::line([1, 2, "three"])"#);
    assert!(
        err.contains("plot::line: ys[2] is string, not a number"),
        "{err}"
    );
    let err = script_error(&engine(), r#"plot::line(#{ val: [1, ()] }, #{})"#);
    assert!(err.contains("series 'val'[1] is ()"), "{err}");
}

#[test]
fn rhai_log_y_error_reaches_the_script() {
    let err = script_error(
        &engine(),
        "plot::line([1, -1], #{ log_y: true, path: \"x.png\" })",
    );
    assert!(
        err.contains("log_y needs positive values, but series 'ys' has -1 at index 1"),
        "{err}"
    );
}

#[test]
fn tensors_are_flattened_into_values() {
    let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let values = values_from_dynamic(&Dynamic::from(t), "ys").unwrap();
    assert_eq!(values, vec![1.0, 2.0, 3.0, 4.0]);
    let err = values_from_dynamic(&Dynamic::from("text"), "ys").unwrap_err();
    assert!(err
        .to_string()
        .contains("ys must be an array of numbers or a tensor"));
}

#[test]
fn plot_functions_carry_a_doc_comment_with_an_example() {
    let json = engine().gen_fn_metadata_to_json(false).unwrap();
    for name in ["plot::line", "plot::scatter", "plot::hist"] {
        assert!(
            json.contains(&format!("Example: `{name}(")),
            "{name} lacks an example"
        );
    }
}

#[test]
fn heatmap_shades_the_largest_cell_darkest_at_its_row_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options_in(dir.path(), "heat.png");
    // The largest value is row 0, column 1: the upper right cell, as a matrix is printed.
    let path = heatmap(
        &[vec![0.0, 5.0], vec![1.0, 0.0]],
        &AxisNames::default(),
        &opts,
    )
    .unwrap();
    let img = Image::read(&path);
    let darkest = RGBColor(8, 48, 107);
    // Well inside each quarter of the plot area, away from the cell borders.
    assert!(img.count(darkest, (0.65, 0.85), (0.15, 0.35)) > 1000);
    for (x, y) in [
        ((0.2, 0.4), (0.62, 0.8)),
        ((0.2, 0.4), (0.15, 0.35)),
        ((0.65, 0.85), (0.62, 0.8)),
    ] {
        assert_eq!(img.count(darkest, x, y), 0, "{x:?} {y:?}");
    }
}

#[test]
fn heatmap_rejects_ragged_rows_naming_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let e = heatmap(
        &[vec![1.0, 2.0], vec![3.0]],
        &AxisNames::default(),
        &options_in(dir.path(), "h.png"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("row 1 has 1"), "{e}");
}

#[test]
fn heatmap_rejects_names_that_do_not_match_the_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let names = AxisNames {
        rows: vec!["cat".into(), "dog".into(), "bird".into()],
        columns: Vec::new(),
    };
    let e = heatmap(
        &[vec![1.0, 2.0], vec![3.0, 4.0]],
        &names,
        &options_in(dir.path(), "h.png"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("3 row names for 2 rows"), "{e}");
}

/// Runs `plot::confusion_matrix(cm, path, opts)` on a [2, 2] matrix; returns the image or
/// the error.
fn confusion_plot(values: [i64; 4], dir: &Path, opts: &str) -> Result<Image, String> {
    let mut scope = rhai::Scope::new();
    scope.push("cm", Tensor::from_vec(values.to_vec(), &[2, 2]).unwrap());
    let path = dir.join("cm.png");
    let script = format!(
        r#"plot::confusion_matrix(cm, "{}", {opts})"#,
        path.display()
    );
    engine()
        .eval_with_scope::<String>(&mut scope, &script)
        .map(|_| Image::read(&path))
        .map_err(|e| e.to_string())
}

#[test]
fn confusion_matrix_plot_normalizes_each_true_class_row_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let darkest = RGBColor(8, 48, 107);
    // Row 0 holds 1 sample, row 1 nine: only normalized is the top-left cell as dark as the
    // bottom-right one.
    let upper_left = ((0.2, 0.45), (0.15, 0.4));
    let counts = confusion_plot([1, 0, 0, 9], dir.path(), "#{}").unwrap();
    assert_eq!(counts.count(darkest, upper_left.0, upper_left.1), 0);
    let rows = confusion_plot([1, 0, 0, 9], dir.path(), "#{ normalize: true }").unwrap();
    assert!(rows.count(darkest, upper_left.0, upper_left.1) > 1000);
}

#[test]
fn confusion_matrix_plot_rejects_bad_options_and_shapes_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let error = |opts: &str| {
        confusion_plot([1, 0, 0, 1], dir.path(), opts)
            .err()
            .unwrap()
    };
    let e = error(r#"#{ normalize: "rows" }"#);
    assert!(
        e.contains("normalize must be") && e.contains("\"pred\""),
        "{e}"
    );
    let e = error(r#"#{ classes: ["a", "b", "c"] }"#);
    assert!(e.contains("3 class names for a matrix of 2 classes"), "{e}");
    let e = script_error(&engine(), r#"plot::confusion_matrix([1, 2], "cm.png")"#);
    assert!(e.contains("cm must be a tensor"), "{e}");
}

/// A loss curve falls from the upper left to the lower right and a baseline runs along the top:
/// the legend goes to the lower left, the corner that hides none of them.
#[test]
fn the_legend_goes_to_the_corner_with_the_fewest_points() {
    use super::canvas::emptiest_corner;
    use plotters::prelude::SeriesLabelPosition;
    let mut points: Vec<(f64, f64)> = (0..50).map(|i| (i as f64, 5.0 - 0.08 * i as f64)).collect();
    points.extend((0..50).map(|i| (i as f64, 5.0)));
    let corner = emptiest_corner(&points, &(0.0..49.0), &(1.0..5.0), false);
    assert!(
        matches!(corner, SeriesLabelPosition::LowerLeft),
        "{corner:?}"
    );
}

/// A long title shrinks to fit the width instead of running off both edges.
#[test]
fn a_long_title_gets_a_smaller_font() {
    use super::canvas::title_size;
    assert_eq!(title_size("loss", 800), 24);
    let long = "language model on a corpus with a very long folder name (small, 2000 steps)";
    let size = title_size(long, 800);
    assert!(
        size < 24 && size as f64 * 0.55 * long.len() as f64 <= 800.0 - 32.0,
        "{size}"
    );
}
