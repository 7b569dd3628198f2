//! CSV files with a header row and one label column, read into a `Dataset`.
//!
//! The dialect is RFC 4180 as spreadsheets and pandas write it: quoted fields may hold the
//! delimiter, line breaks and doubled quotes; lines end in LF or CRLF; blank lines are skipped.
//! Memory stays proportional to the input: values are pushed as they are parsed (never
//! pre-sized from anything the file says), labels are interned, and one record is held at a time.
//!
//! Numbers that are not finite (`NaN`, `inf`, or `1e999`, beyond f32) are kept as read, as
//! pandas keeps them, and so are empty cells, read as NaN as pandas reads them (unless the
//! options refuse them); but never silently: the read warns once with their count and where
//! the first one is (`file:line:column`), since one NaN feature turns every loss of a training
//! run into NaN. A class column of many distinct numbers is read as classes with a warning that
//! names `task: "regression"`.

mod records;

use super::Dataset;
use crate::{Error, Result, Tensor};
use records::Records;
use std::collections::HashMap;
use std::path::Path;

/// More distinct numeric labels than this in a class column is probably a regression target.
const MANY_NUMERIC_CLASSES: usize = 20;

/// How the label column is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TargetKind {
    /// Labels are class names, mapped to ids 0..k in sorted order (numerically when every
    /// label is an integer, so labels "0".."9" keep their own numbers as ids).
    #[default]
    Class,
    /// Labels are numbers, kept as f32 regression targets.
    Regression,
}

#[derive(Clone, Debug)]
pub struct CsvOptions {
    /// The header name of the label column; every other column is a numeric feature.
    pub label: String,
    pub target: TargetKind,
    /// An ASCII byte other than a quote or a line break.
    pub delimiter: u8,
    /// An empty numeric cell is NaN (pandas' reading, with a warning), or an error.
    pub empty_is_nan: bool,
}

impl CsvOptions {
    pub fn classification(label: &str) -> CsvOptions {
        CsvOptions {
            label: label.to_string(),
            target: TargetKind::Class,
            delimiter: b',',
            empty_is_nan: true,
        }
    }

    pub fn regression(label: &str) -> CsvOptions {
        CsvOptions {
            target: TargetKind::Regression,
            ..Self::classification(label)
        }
    }
}

impl Dataset {
    /// A classification dataset from a CSV file whose column `label` holds the class names.
    pub fn from_csv(path: impl AsRef<Path>, label: &str) -> Result<Dataset> {
        read_csv(path, &CsvOptions::classification(label))
    }
}

pub fn read_csv(path: impl AsRef<Path>, options: &CsvOptions) -> Result<Dataset> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let (dataset, notes) = parse(&bytes, options).map_err(|e| super::in_file(path, e))?;
    for note in notes.lines(&path.display().to_string()) {
        crate::messages::warn(&note);
    }
    Ok(dataset)
}

/// Parses CSV text; errors name the data row (1-based, after the header), its line in the
/// file and the column. Non-finite numbers and empty cells are warned about as in `read_csv`.
pub fn parse_csv(bytes: &[u8], options: &CsvOptions) -> Result<Dataset> {
    let (dataset, notes) = parse(bytes, options)?;
    for note in notes.lines("csv") {
        crate::messages::warn(&note);
    }
    Ok(dataset)
}

/// What a read warns about: values not finite, empty cells read as NaN, and a class column
/// that looks numeric.
#[derive(Debug, Default)]
struct Notes {
    non_finite: NonFinite,
    empty: NonFinite,
    numeric_classes: Option<(String, usize)>,
}

impl Notes {
    fn lines(&self, source: &str) -> Vec<String> {
        let mut out: Vec<String> = self.non_finite.note(source).into_iter().collect();
        if let (Some((line, col, name, _)), n) = (&self.empty.first, self.empty.count) {
            out.push(format!(
                "{source}:{line}:{col}: {n} empty cell{} read as NaN (as pandas reads them), the \
                 first in column {name:?}; fill or drop them before training, or pass \
                 missing: \"error\" to refuse them",
                if n == 1 { "" } else { "s" }
            ));
        }
        if let Some((column, k)) = &self.numeric_classes {
            out.push(format!(
                "{source}: the label column {column:?} holds {k} distinct numbers, read as {k} \
                 classes; if it is a quantity to predict, read it with task: \"regression\""
            ));
        }
        out
    }
}

/// The numbers of a read that are not finite: how many, and the first one's line, column
/// (1-based) and column name.
#[derive(Debug, Default)]
struct NonFinite {
    count: usize,
    first: Option<(usize, usize, String, String)>,
}

impl NonFinite {
    fn see(&mut self, value: f32, cell: &str, line: usize, col: usize, name: &str) {
        if value.is_finite() {
            return;
        }
        self.count += 1;
        if self.first.is_none() {
            let shown: String = cell.trim().chars().take(40).collect();
            self.first = Some((line, col + 1, name.to_string(), shown));
        }
    }

    /// The warning for a read of `source`, or `None` when every number was finite.
    fn note(&self, source: &str) -> Option<String> {
        let (line, col, name, text) = self.first.as_ref()?;
        let n = self.count;
        Some(format!(
            "{source}:{line}:{col}: {n} value{} not finite (NaN, inf, or beyond f32), the first \
             {text:?} in column {name:?}; kept as read, so drop or fill them before training",
            if n == 1 { " is" } else { "s are" }
        ))
    }
}

fn parse(bytes: &[u8], options: &CsvOptions) -> Result<(Dataset, Notes)> {
    let d = options.delimiter;
    if !d.is_ascii() || matches!(d, b'"' | b'\r' | b'\n') {
        return Err(Error::invalid(
            "csv",
            format!(
                "delimiter {:?} must be an ASCII byte other than a quote or a line break",
                d as char
            ),
        ));
    }
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut records = Records {
        bytes,
        pos: 0,
        line: 1,
        delimiter: d,
    };
    let mut fields = Vec::new();
    if records.next_into(&mut fields)?.is_none() {
        return Err(Error::format("csv", "the file is empty: no header row"));
    }
    let header = fields
        .iter()
        .enumerate()
        .map(|(j, f)| Ok(text(f, 0, j)?.trim().to_string()))
        .collect::<Result<Vec<String>>>()?;
    let label_col = find_label(&header, &options.label)?;

    let mut features: Vec<f32> = Vec::new();
    let mut targets = Targets::new(options.target);
    let mut notes = Notes::default();
    let mut number = |cell: &str, row: usize, line: usize, j: usize, name: &str| {
        if cell.trim().is_empty() && options.empty_is_nan {
            notes.empty.see(f32::NAN, cell, line, j, name);
            return Ok(f32::NAN);
        }
        let v = number(cell, row, line, name)?;
        notes.non_finite.see(v, cell, line, j, name);
        Ok(v)
    };
    let mut row = 0usize;
    while let Some(line) = records.next_into(&mut fields)? {
        row += 1;
        if fields.len() != header.len() {
            return Err(Error::format(
                "csv",
                format!(
                    "row {row} (line {line}) has {} fields, but the header has {}",
                    fields.len(),
                    header.len()
                ),
            ));
        }
        for (j, field) in fields.iter().enumerate() {
            let cell = text(field, row, j)?;
            if j == label_col {
                targets.push(cell, |c| number(c, row, line, j, &header[j]))?;
            } else {
                features.push(number(cell, row, line, j, &header[j])?);
            }
        }
    }
    let width = header.len() - 1;
    let feature_names: Vec<String> = header
        .into_iter()
        .enumerate()
        .filter(|&(j, _)| j != label_col)
        .map(|(_, name)| name)
        .collect();
    let features = Tensor::from_vec(features, &[row, width])?;
    let (targets, class_names) = targets.finish(row)?;
    let dataset = Dataset::new(features, targets)?.with_feature_names(feature_names)?;
    let dataset = match class_names {
        Some(names) => {
            let numeric = names.iter().all(|n| n.trim().parse::<f64>().is_ok());
            if numeric && names.len() > MANY_NUMERIC_CLASSES {
                notes.numeric_classes = Some((options.label.clone(), names.len()));
            }
            dataset.with_class_names(names)?
        }
        None => dataset,
    };
    Ok((dataset, notes))
}

fn find_label(header: &[String], label: &str) -> Result<usize> {
    let mut hits = header.iter().enumerate().filter(|(_, h)| *h == label);
    match (hits.next(), hits.next()) {
        (Some((j, _)), None) => Ok(j),
        (Some(_), Some(_)) => Err(Error::format(
            "csv",
            format!("the label column {label:?} appears more than once in the header"),
        )),
        (None, _) => Err(Error::format(
            "csv",
            format!("no column named {label:?} in the header; columns are {header:?}"),
        )),
    }
}

/// The label column's values: interned class names, or regression numbers.
enum Targets {
    /// Ids in first-seen order, renumbered into sorted order by `finish`.
    Class {
        ids: Vec<u32>,
        seen: HashMap<String, u32>,
    },
    Regression(Vec<f32>),
}

impl Targets {
    fn new(kind: TargetKind) -> Targets {
        match kind {
            TargetKind::Class => Targets::Class {
                ids: Vec::new(),
                seen: HashMap::new(),
            },
            TargetKind::Regression => Targets::Regression(Vec::new()),
        }
    }

    /// Adds one label; a regression target is read by `number`.
    fn push(&mut self, cell: &str, number: impl FnOnce(&str) -> Result<f32>) -> Result<()> {
        match self {
            Targets::Class { ids, seen } => {
                let next = seen.len() as u32;
                ids.push(*seen.entry(cell.trim().to_string()).or_insert(next));
            }
            Targets::Regression(values) => values.push(number(cell)?),
        }
        Ok(())
    }

    fn finish(self, rows: usize) -> Result<(Tensor, Option<Vec<String>>)> {
        match self {
            Targets::Regression(v) => Ok((Tensor::from_vec(v, &[rows])?, None)),
            Targets::Class { ids, seen } => {
                let mut names: Vec<(String, u32)> = seen.into_iter().collect();
                let all_integers = names.iter().all(|(n, _)| n.parse::<i64>().is_ok());
                if all_integers {
                    names.sort_by_key(|(n, _)| n.parse::<i64>().unwrap_or(0));
                } else {
                    names.sort();
                }
                let mut final_id = vec![0i64; names.len()];
                for (new, (_, first_seen)) in names.iter().enumerate() {
                    final_id[*first_seen as usize] = new as i64;
                }
                let targets: Vec<i64> = ids.iter().map(|&i| final_id[i as usize]).collect();
                let names = names.into_iter().map(|(n, _)| n).collect();
                Ok((Tensor::from_vec(targets, &[rows])?, Some(names)))
            }
        }
    }
}

fn text(field: &[u8], row: usize, col: usize) -> Result<&str> {
    std::str::from_utf8(field).map_err(|_| {
        Error::format(
            "csv",
            format!("row {row}, column {}: the cell is not valid UTF-8", col + 1),
        )
    })
}

fn number(cell: &str, row: usize, line: usize, column: &str) -> Result<f32> {
    let t = cell.trim();
    t.parse::<f32>().map_err(|_| {
        let shown: String = t.chars().take(40).collect();
        let what = if t.is_empty() {
            "is empty".to_string()
        } else {
            format!("holds {shown:?}, which is not a number")
        };
        Error::format(
            "csv",
            format!("row {row} (line {line}), column {column:?} {what}"),
        )
    })
}

#[cfg(test)]
mod tests;
