//! The text ultralytics' detection validator prints: the table header (`get_desc`), the
//! `all` row and one row per class (`print_results`), and the speed line.
//!
//! Columns follow its printf formats: the header is `%22s` + `%11s` x 6; rows are
//! `%22s` + `%11i` x 2 + `%11.3g` x 4. `format_g` reproduces Python's `%g`.

use super::metrics::DetMetrics;

/// Milliseconds per image of each stage, as the validator's `speed` dict holds them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Speed {
    pub preprocess: f64,
    pub inference: f64,
    pub loss: f64,
    pub postprocess: f64,
}

/// `('%22s' + '%11s' * 6) % ('Class', 'Images', 'Instances', 'Box(P', 'R', 'mAP50', 'mAP50-95)')`.
pub fn header() -> String {
    let mut s = format!("{:>22}", "Class");
    for col in ["Images", "Instances", "Box(P", "R", "mAP50", "mAP50-95)"] {
        s.push_str(&format!("{col:>11}"));
    }
    s
}

/// One table row: name, two counts, four metrics.
pub fn row(name: &str, images: usize, instances: usize, values: [f64; 4]) -> String {
    let mut s = format!("{name:>22}{images:>11}{instances:>11}");
    for v in values {
        s.push_str(&format!("{:>11}", format_g(v, 3)));
    }
    s
}

/// What `print_results` logs, one line each: the `all` row; the no-labels warning when there
/// are no targets; and, when `verbose` and there is more than one class, a row per class with
/// targets (images containing it, its instances, its P, R, AP50, AP50-95).
pub fn results_table(metrics: &DetMetrics, verbose: bool) -> String {
    let instances: usize = metrics.nt_per_class.iter().sum();
    let mut lines = vec![row("all", metrics.seen, instances, metrics.mean_results())];
    if instances == 0 {
        lines.push(
            "WARNING ⚠️ no labels found in detect set, cannot compute metrics without labels"
                .to_string(),
        );
    }
    if verbose && metrics.names.len() > 1 {
        for (i, &c) in metrics.ap_class_index().iter().enumerate() {
            let name = metrics.names.get(c).map(String::as_str).unwrap_or("?");
            let count = |v: &[usize]| v.get(c).copied().unwrap_or(0);
            if let Some(values) = metrics.class_result(i) {
                lines.push(row(
                    name,
                    count(&metrics.nt_per_image),
                    count(&metrics.nt_per_class),
                    values,
                ));
            }
        }
    }
    lines.join("\n")
}

/// `Speed: 0.3ms preprocess, 4.1ms inference, 0.0ms loss, 1.2ms postprocess per image`.
pub fn speed_line(speed: &Speed) -> String {
    format!(
        "Speed: {:.1}ms preprocess, {:.1}ms inference, {:.1}ms loss, {:.1}ms postprocess per image",
        speed.preprocess, speed.inference, speed.loss, speed.postprocess
    )
}

/// Python's `'%.{precision}g' % v`: `precision` significant digits, fixed notation when the
/// decimal exponent is in `[-4, precision)`, else `d.dde±XX`; trailing zeros dropped.
pub fn format_g(v: f64, precision: usize) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let p = precision.max(1);
    // Rounding to p significant digits decides the exponent (0.9995 becomes 1.00e+00).
    let sci = format!("{:.*e}", p - 1, v);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp >= -4 && exp < p as i32 {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        strip_zeros(&format!("{v:.decimals$}"))
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip_zeros(mantissa), exp.abs())
    }
}

fn strip_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vision::metrics::{ImageStats, NIOU};

    #[test]
    fn format_g_matches_python() {
        // Each right-hand side is Python's '%.3g' % value.
        let cases = [
            (0.0, "0"),
            (0.5, "0.5"),
            (0.123456, "0.123"),
            (0.99951, "1"),
            (0.995, "0.995"),
            (1234.5, "1.23e+03"),
            (0.00012345, "0.000123"),
            (0.000012345, "1.23e-05"),
            (-0.25, "-0.25"),
            (100.0, "100"),
            (f64::NAN, "nan"),
        ];
        for (v, want) in cases {
            assert_eq!(format_g(v, 3), want, "{v}");
        }
    }

    #[test]
    fn header_and_rows_use_the_validator_widths() {
        assert_eq!(
            header(),
            "                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95)"
        );
        assert_eq!(
            row("person", 8, 29, [0.6789, 0.5, 0.61234, 0.40004]),
            "                person          8         29      0.679        0.5      0.612        0.4"
        );
    }

    #[test]
    fn results_table_lists_classes_only_when_verbose() {
        let mut m = DetMetrics::new(vec!["cat".into(), "dog".into()]);
        m.update(ImageStats {
            tp: vec![[true; NIOU]],
            conf: vec![0.9],
            pred_cls: vec![1],
            target_cls: vec![1, 1],
        });
        m.process();
        let quiet = results_table(&m, false);
        assert_eq!(quiet.lines().count(), 1);
        assert!(quiet.trim_start().starts_with("all          1          2"));
        let verbose = results_table(&m, true);
        let lines: Vec<&str> = verbose.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[1]
            .trim_start()
            .starts_with("dog          1          2"));
    }

    #[test]
    fn speed_line_has_one_decimal_per_stage() {
        let s = Speed {
            preprocess: 0.26,
            inference: 4.04,
            loss: 0.0,
            postprocess: 1.25,
        };
        assert_eq!(
            speed_line(&s),
            "Speed: 0.3ms preprocess, 4.0ms inference, 0.0ms loss, 1.2ms postprocess per image"
        );
    }
}
