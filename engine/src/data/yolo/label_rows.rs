//! The rows of one YOLO label file: parsing (boxes, or polygons reduced to their boxes), the
//! value checks of ultralytics' `verify_image_label`, and its duplicate removal. Each error is
//! the reason the image is dropped, worded as ultralytics words it.

use std::path::Path;

/// One label row as parsed: the 5 box values, and for polygons the class and points (the
/// key ultralytics deduplicates polygon rows by).
pub(crate) struct Row {
    pub(crate) values: [f32; 5],
    polygon: Option<Vec<f32>>,
}

/// The label file's rows, polygons converted to boxes.
pub(crate) fn read_rows(label_file: &Path) -> std::result::Result<Vec<Row>, String> {
    let bytes = std::fs::read(label_file).map_err(|e| e.to_string())?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("{} is not UTF-8 text", label_file.display()))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let lines: Vec<Vec<&str>> = text
        .trim()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    let number = |s: &str| {
        s.parse::<f64>()
            .map(|v| v as f32)
            .map_err(|_| format!("could not convert string to float: '{s}'"))
    };
    if lines.iter().any(|l| l.len() > 6) {
        if lines.iter().any(|l| l.len() == 5) {
            return Err("labels mix segment and detection rows".into());
        }
        return lines
            .iter()
            .map(|l| {
                let values = l
                    .iter()
                    .map(|s| number(s))
                    .collect::<std::result::Result<Vec<f32>, _>>()?;
                let points = &values[1..];
                if points.is_empty() || points.len() % 2 != 0 {
                    return Err(format!(
                        "polygon of {} coordinates (needs x y pairs)",
                        points.len()
                    ));
                }
                let xs = points.iter().step_by(2);
                let ys = points.iter().skip(1).step_by(2);
                let (x1, x2) = xs.fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| {
                    (a.min(x), b.max(x))
                });
                let (y1, y2) = ys.fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &y| {
                    (a.min(y), b.max(y))
                });
                let b = [
                    values[0],
                    (x1 + x2) / 2.0,
                    (y1 + y2) / 2.0,
                    x2 - x1,
                    y2 - y1,
                ];
                Ok(Row {
                    values: b,
                    polygon: Some(values),
                })
            })
            .collect();
    }
    lines
        .iter()
        .map(|l| {
            if l.len() != 5 {
                return Err(format!(
                    "labels require 5 columns, {} columns detected",
                    l.len()
                ));
            }
            let mut values = [0f32; 5];
            for (v, s) in values.iter_mut().zip(l) {
                *v = number(s)?;
            }
            Ok(Row {
                values,
                polygon: None,
            })
        })
        .collect()
}

/// The value checks of `verify_image_label`, in its order (NaN fails them all).
pub(crate) fn check_rows(
    rows: Vec<Row>,
    num_classes: usize,
) -> std::result::Result<Vec<Row>, String> {
    if rows.is_empty() {
        return Ok(rows);
    }
    let coords = || rows.iter().flat_map(|r| r.values[1..].iter().copied());
    let bad_max: Vec<f32> = coords().filter(|v| v.is_nan() || *v > 1.01).collect();
    if !bad_max.is_empty() {
        return Err(format!(
            "non-normalized or out of bounds coordinates {bad_max:?}"
        ));
    }
    let all = || rows.iter().flat_map(|r| r.values.iter().copied());
    let min = all().fold(f32::INFINITY, |m, v| {
        if v.is_nan() || m.is_nan() {
            f32::NAN
        } else {
            m.min(v)
        }
    });
    let min_wh = rows
        .iter()
        .flat_map(|r| r.values[3..5].iter().copied())
        .fold(f32::INFINITY, f32::min);
    if !(min >= 0.0 || (min >= -0.01 && min_wh >= 0.0)) {
        let negative: Vec<f32> = all().filter(|v| v.is_nan() || *v < 0.0).collect();
        return Err(format!("negative label values {negative:?}"));
    }
    let fractional: Vec<f32> = rows
        .iter()
        .map(|r| r.values[0])
        .filter(|c| c.fract() != 0.0)
        .collect();
    if !fractional.is_empty() {
        return Err(format!("non-integer class labels {fractional:?}"));
    }
    let max_class = rows.iter().map(|r| r.values[0]).fold(0.0f32, f32::max);
    if max_class >= num_classes as f32 {
        return Err(format!(
            "Label class {} exceeds dataset class count {num_classes}. Possible class labels are 0-{}",
            max_class as i64,
            num_classes as i64 - 1
        ));
    }
    Ok(rows)
}

/// Removes duplicate rows as `np.unique(..., return_index=True)` does: when any row repeats,
/// the first of each is kept and the result is sorted (box rows by value, polygon rows by the
/// bytes of class and points). Rows are left in file order when none repeats.
pub(crate) fn dedupe(rows: Vec<Row>) -> (Vec<Row>, usize) {
    let n = rows.len();
    let mut order: Vec<usize> = (0..n).collect();
    let polygon = rows.iter().any(|r| r.polygon.is_some());
    let key = |r: &Row| -> Vec<u8> {
        let class = r.values[0].to_le_bytes().into_iter();
        let pts = r
            .polygon
            .as_deref()
            .unwrap_or(&[])
            .iter()
            .skip(1)
            .flat_map(|v| v.to_le_bytes());
        class.chain(pts).collect()
    };
    if polygon {
        let keys: Vec<Vec<u8>> = rows.iter().map(key).collect();
        order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
        order.dedup_by(|b, a| keys[*a] == keys[*b]);
    } else {
        let cmp = |a: &Row, b: &Row| {
            a.values
                .iter()
                .zip(&b.values)
                .map(|(x, y)| x.total_cmp(y))
                .find(|o| o.is_ne())
        };
        let same = |a: &Row, b: &Row| a.values.iter().zip(&b.values).all(|(x, y)| x == y);
        order.sort_by(|&a, &b| cmp(&rows[a], &rows[b]).unwrap_or(std::cmp::Ordering::Equal));
        order.dedup_by(|b, a| same(&rows[*a], &rows[*b]));
    }
    let removed = n - order.len();
    if removed == 0 {
        return (rows, 0);
    }
    let mut slots: Vec<Option<Row>> = rows.into_iter().map(Some).collect();
    (
        order.iter().filter_map(|&i| slots[i].take()).collect(),
        removed,
    )
}
