//! results.csv as ultralytics writes it for detection (`BaseTrainer.save_metrics`): a header
//! line, then one row per epoch. Every value is written with Python's `%.6g`; the losses and
//! metrics are first rounded to 5 decimals (`round(x, 5)` in `label_loss_items` and the
//! validator), the time (seconds since training began) and learning rates are not.

use crate::vision::report::format_g;
use crate::{Error, Result};
use std::io::Write;
use std::path::Path;

/// The columns, in ultralytics' order.
pub const DETECT_COLUMNS: [&str; 15] = [
    "epoch",
    "time",
    "train/box_loss",
    "train/cls_loss",
    "train/dfl_loss",
    "metrics/precision(B)",
    "metrics/recall(B)",
    "metrics/mAP50(B)",
    "metrics/mAP50-95(B)",
    "val/box_loss",
    "val/cls_loss",
    "val/dfl_loss",
    "lr/pg0",
    "lr/pg1",
    "lr/pg2",
];

/// One epoch's values.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochRow {
    /// The epoch's index from 0 (written from 1, as ultralytics does).
    pub epoch: usize,
    /// Seconds since training began.
    pub time: f64,
    /// Mean box, class and DFL losses over the epoch.
    pub train_losses: [f64; 3],
    /// Precision, recall, mAP50, mAP50-95.
    pub metrics: [f64; 4],
    pub val_losses: [f64; 3],
    /// pg0 (decayed weights), pg1 (norm weights), pg2 (biases).
    pub lrs: [f64; 3],
}

/// The header line, without the newline.
pub fn header() -> String {
    DETECT_COLUMNS.join(",")
}

/// One row, without the newline.
pub fn row(r: &EpochRow) -> String {
    let rounded = r
        .train_losses
        .iter()
        .chain(&r.metrics)
        .chain(&r.val_losses)
        .map(|&v| python_round(v, 5));
    let values: Vec<f64> = [(r.epoch + 1) as f64, r.time]
        .into_iter()
        .chain(rounded)
        .chain(r.lrs)
        .collect();
    values
        .iter()
        .map(|&v| format_g(v, 6))
        .collect::<Vec<_>>()
        .join(",")
}

/// Appends a row to `path`, writing the header first when the file does not exist yet.
pub fn append_row(path: &Path, r: &EpochRow) -> Result<()> {
    let fail =
        |e: std::io::Error| Error::invalid("results.csv", format!("{}: {e}", path.display()));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let mut text = String::new();
    if !path.exists() {
        text += &header();
        text.push('\n');
    }
    text += &row(r);
    text.push('\n');
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(fail)?;
    file.write_all(text.as_bytes()).map_err(fail)
}

/// A results.csv read back by column, in the file's order: ours, or ultralytics' (same layout;
/// older ultralytics versions padded the names with spaces, which are trimmed). Every value must
/// be a number and every row as long as the header.
pub fn read_columns(path: &Path) -> Result<Vec<(String, Vec<f64>)>> {
    let bad = |what: String| Error::invalid("results.csv", format!("{}: {what}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = lines
        .next()
        .ok_or_else(|| bad("empty file, no header".into()))?;
    let mut columns: Vec<(String, Vec<f64>)> = header
        .split(',')
        .map(|name| (name.trim().to_string(), Vec::new()))
        .collect();
    for (i, line) in lines.enumerate() {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != columns.len() {
            let n = columns.len();
            return Err(bad(format!(
                "row {} has {} values, the header names {n}",
                i + 1,
                fields.len()
            )));
        }
        for ((name, values), field) in columns.iter_mut().zip(fields) {
            let v = field.trim().parse::<f64>().map_err(|_| {
                bad(format!(
                    "row {}, column {name}: {field:?} is not a number",
                    i + 1
                ))
            })?;
            values.push(v);
        }
    }
    Ok(columns)
}

/// Python's `round(x, digits)`: the exact binary value rounded to `digits` decimals (ties to
/// even), which is what Rust's formatting does.
pub fn python_round(x: f64, digits: usize) -> f64 {
    if !x.is_finite() {
        return x;
    }
    format!("{x:.digits$}").parse().unwrap_or(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected lines from Python: ('%s,' * 15 % (...)).rstrip(',') and
    // ('%.6g,' * 15 % (epoch + 1, time, *round5(losses, metrics), *lrs)).rstrip(',').

    #[test]
    fn header_matches_ultralytics() {
        assert_eq!(
            header(),
            "epoch,time,train/box_loss,train/cls_loss,train/dfl_loss,metrics/precision(B),\
             metrics/recall(B),metrics/mAP50(B),metrics/mAP50-95(B),val/box_loss,val/cls_loss,\
             val/dfl_loss,lr/pg0,lr/pg1,lr/pg2"
        );
    }

    #[test]
    fn rows_round_to_five_decimals_then_print_six_significant_digits() {
        let r = EpochRow {
            epoch: 0,
            time: 123.456789,
            train_losses: [1.234567891, 2.5, 0.9999996],
            metrics: [0.123456789, 0.5, 0.00001234, 0.9],
            val_losses: [1.1, 2.2, 3.3],
            lrs: [0.0016666666666666668, 0.0016666666666666668, 0.085],
        };
        assert_eq!(
            row(&r),
            "1,123.457,1.23457,2.5,1,0.12346,0.5,1e-05,0.9,1.1,2.2,3.3,0.00166667,0.00166667,0.085"
        );
    }

    #[test]
    fn learning_rates_are_not_rounded_but_losses_are() {
        let r = EpochRow {
            epoch: 11,
            time: 98765.4321,
            train_losses: [1e-6; 3],
            metrics: [1e-6; 4],
            val_losses: [1e-6; 3],
            lrs: [1e-6; 3],
        };
        assert_eq!(row(&r), "12,98765.4,0,0,0,0,0,0,0,0,0,0,1e-06,1e-06,1e-06");
    }

    #[test]
    fn append_writes_the_header_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/results.csv");
        let r = EpochRow {
            epoch: 0,
            time: 1.0,
            train_losses: [1.0; 3],
            metrics: [0.5; 4],
            val_losses: [1.0; 3],
            lrs: [0.01; 3],
        };
        append_row(&path, &r).unwrap();
        append_row(&path, &EpochRow { epoch: 1, ..r }).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], header());
        assert!(lines[2].starts_with("2,1,"), "{}", lines[2]);
    }

    #[test]
    fn columns_read_back_what_append_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.csv");
        let r = EpochRow {
            epoch: 0,
            time: 1.5,
            train_losses: [1.0, 2.0, 3.0],
            metrics: [0.5, 0.25, 0.125, 0.0625],
            val_losses: [1.0; 3],
            lrs: [0.01; 3],
        };
        append_row(&path, &r).unwrap();
        append_row(&path, &EpochRow { epoch: 1, ..r }).unwrap();
        let columns = read_columns(&path).unwrap();
        let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, DETECT_COLUMNS);
        assert_eq!(columns[0].1, [1.0, 2.0]);
        assert_eq!(columns[8].1, [0.0625, 0.0625]);
    }

    #[test]
    fn padded_names_are_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.csv");
        std::fs::write(&path, "  epoch, metrics/mAP50-95(B)\n 1, 0.25\n").unwrap();
        let columns = read_columns(&path).unwrap();
        assert_eq!(columns[1], ("metrics/mAP50-95(B)".to_string(), vec![0.25]));
    }

    #[test]
    fn an_empty_or_binary_file_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.csv");
        std::fs::write(&path, "").unwrap();
        let e = read_columns(&path).unwrap_err().to_string();
        assert!(e.contains("empty file, no header"), "{e}");
        std::fs::write(&path, [0x65, 0x70, 0xff, 0xfe, 0x0a, 0x31]).unwrap();
        let e = read_columns(&path).unwrap_err().to_string();
        assert!(e.contains("results.csv"), "{e}");
    }

    #[test]
    fn a_short_row_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.csv");
        std::fs::write(&path, "epoch,time\n1,2\n2\n").unwrap();
        let e = read_columns(&path).unwrap_err().to_string();
        assert!(e.contains("row 2 has 1 values"), "{e}");
    }

    #[test]
    fn a_value_that_is_not_a_number_is_an_error_naming_its_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.csv");
        std::fs::write(&path, "epoch,time\n1,soon\n").unwrap();
        let e = read_columns(&path).unwrap_err().to_string();
        assert!(e.contains("row 1, column time"), "{e}");
    }
}
