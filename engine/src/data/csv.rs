//! CSV files with a header row and one label column, read into a `Dataset`.
//!
//! The dialect is RFC 4180 as spreadsheets and pandas write it: quoted fields may hold the
//! delimiter, line breaks and doubled quotes; lines end in LF or CRLF; blank lines are skipped.
//! Memory stays proportional to the input: values are pushed as they are parsed (never
//! pre-sized from anything the file says), labels are interned, and one record is held at a time.
//!
//! Numbers that are not finite (`NaN`, `inf`, or `1e999`, beyond f32) are kept as read, as
//! pandas keeps them, but never silently: the read warns once with their count and where the
//! first one is (`file:line:column`), since one NaN feature turns every loss of a training run
//! into NaN.

use super::Dataset;
use crate::{Error, Result, Tensor};
use std::collections::HashMap;
use std::path::Path;

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
}

impl CsvOptions {
    pub fn classification(label: &str) -> CsvOptions {
        CsvOptions {
            label: label.to_string(),
            target: TargetKind::Class,
            delimiter: b',',
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
    let (dataset, non_finite) = parse(&bytes, options).map_err(|e| super::in_file(path, e))?;
    if let Some(note) = non_finite.note(&path.display().to_string()) {
        crate::messages::warn(&note);
    }
    Ok(dataset)
}

/// Parses CSV text; errors name the data row (1-based, after the header), its line in the
/// file and the column. Non-finite numbers are warned about as in `read_csv`.
pub fn parse_csv(bytes: &[u8], options: &CsvOptions) -> Result<Dataset> {
    let (dataset, non_finite) = parse(bytes, options)?;
    if let Some(note) = non_finite.note("csv") {
        crate::messages::warn(&note);
    }
    Ok(dataset)
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

fn parse(bytes: &[u8], options: &CsvOptions) -> Result<(Dataset, NonFinite)> {
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
    let mut non_finite = NonFinite::default();
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
                if let Some(v) = targets.push(cell, row, line, &header[j])? {
                    non_finite.see(v, cell, line, j, &header[j]);
                }
            } else {
                let v = number(cell, row, line, &header[j])?;
                non_finite.see(v, cell, line, j, &header[j]);
                features.push(v);
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
        Some(names) => dataset.with_class_names(names)?,
        None => dataset,
    };
    Ok((dataset, non_finite))
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

    /// Adds one label; returns the number read for a regression target.
    fn push(&mut self, cell: &str, row: usize, line: usize, column: &str) -> Result<Option<f32>> {
        match self {
            Targets::Class { ids, seen } => {
                let next = seen.len() as u32;
                ids.push(*seen.entry(cell.trim().to_string()).or_insert(next));
                Ok(None)
            }
            Targets::Regression(values) => {
                let v = number(cell, row, line, column)?;
                values.push(v);
                Ok(Some(v))
            }
        }
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

/// Splits the input into records of raw field bytes.
struct Records<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// The 1-based line the read position is on.
    line: usize,
    delimiter: u8,
}

enum FieldEnd {
    Delimiter,
    LineOrEof,
}

impl Records<'_> {
    /// Reads the next non-blank record into `fields` and returns the line it starts on, or
    /// `None` at the end of the input.
    fn next_into(&mut self, fields: &mut Vec<Vec<u8>>) -> Result<Option<usize>> {
        fields.clear();
        while let Some(&b) = self.bytes.get(self.pos) {
            if b != b'\n' && b != b'\r' {
                break;
            }
            self.end_of_line();
        }
        if self.pos >= self.bytes.len() {
            return Ok(None);
        }
        let start = self.line;
        loop {
            let mut field = Vec::new();
            let end = self.field(&mut field, start)?;
            fields.push(field);
            if let FieldEnd::LineOrEof = end {
                return Ok(Some(start));
            }
        }
    }

    fn field(&mut self, out: &mut Vec<u8>, record_line: usize) -> Result<FieldEnd> {
        if self.bytes.get(self.pos) == Some(&b'"') {
            self.pos += 1;
            self.quoted(out, record_line)?;
            return match self.bytes.get(self.pos) {
                Some(&b) if b == self.delimiter => {
                    self.pos += 1;
                    Ok(FieldEnd::Delimiter)
                }
                Some(b'\n' | b'\r') | None => {
                    self.end_of_line();
                    Ok(FieldEnd::LineOrEof)
                }
                Some(&b) => Err(Error::format(
                    "csv",
                    format!(
                        "line {}: unexpected {:?} after a closing quote",
                        self.line, b as char
                    ),
                )),
            };
        }
        while let Some(&b) = self.bytes.get(self.pos) {
            if b == self.delimiter {
                self.pos += 1;
                return Ok(FieldEnd::Delimiter);
            }
            if b == b'\n' || b == b'\r' {
                self.end_of_line();
                return Ok(FieldEnd::LineOrEof);
            }
            out.push(b);
            self.pos += 1;
        }
        Ok(FieldEnd::LineOrEof)
    }

    /// The body of a quoted field, up to and past its closing quote.
    fn quoted(&mut self, out: &mut Vec<u8>, record_line: usize) -> Result<()> {
        while let Some(&b) = self.bytes.get(self.pos) {
            self.pos += 1;
            match b {
                b'"' if self.bytes.get(self.pos) == Some(&b'"') => {
                    out.push(b'"');
                    self.pos += 1;
                }
                b'"' => return Ok(()),
                _ => {
                    if b == b'\n' {
                        self.line += 1;
                    }
                    out.push(b);
                }
            }
        }
        Err(Error::format(
            "csv",
            format!("a quoted field in the record starting on line {record_line} is never closed"),
        ))
    }

    /// Consumes one LF, CRLF or lone CR.
    fn end_of_line(&mut self) {
        if self.bytes.get(self.pos) == Some(&b'\r') {
            self.pos += 1;
        }
        if self.bytes.get(self.pos) == Some(&b'\n') {
            self.pos += 1;
        }
        self.line += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Dataset> {
        parse_csv(text.as_bytes(), &CsvOptions::classification("species"))
    }

    #[test]
    fn reads_features_and_maps_class_labels_to_sorted_ids() {
        let d = parse("a,species,b\n1,setosa,2\n3,virginica,4\n5,setosa,6\n").unwrap();
        assert_eq!(d.features().shape(), &[3, 2]);
        assert_eq!(
            d.features().to_vec::<f32>().unwrap(),
            [1., 2., 3., 4., 5., 6.]
        );
        assert_eq!(d.targets().to_vec::<i64>().unwrap(), [0, 1, 0]);
        assert_eq!(d.class_names().unwrap(), ["setosa", "virginica"]);
        assert_eq!(d.feature_names(), ["a", "b"]);
    }

    #[test]
    fn class_ids_follow_sorted_order_not_first_appearance() {
        let d = parse("x,species\n1,zebra\n2,ant\n3,moth\n").unwrap();
        assert_eq!(d.targets().to_vec::<i64>().unwrap(), [2, 0, 1]);
        assert_eq!(d.class_names().unwrap(), ["ant", "moth", "zebra"]);
    }

    #[test]
    fn integer_labels_sort_numerically() {
        let d = parse("x,species\n1,10\n2,2\n3,0\n").unwrap();
        assert_eq!(d.class_names().unwrap(), ["0", "2", "10"]);
        assert_eq!(d.targets().to_vec::<i64>().unwrap(), [2, 1, 0]);
    }

    #[test]
    fn regression_targets_are_numbers() {
        let opts = CsvOptions::regression("price");
        let d = parse_csv(b"size,price\n1,2.5\n2,-3e1\n", &opts).unwrap();
        assert_eq!(d.targets().to_vec::<f32>().unwrap(), [2.5, -30.0]);
        assert!(d.class_names().is_none());
        assert!(parse_csv(b"size,price\n1,cheap\n", &opts).is_err());
    }

    #[test]
    fn quoted_fields_keep_commas_doubled_quotes_and_line_breaks() {
        let text = "\"a,b\",species\n\"1.5\",\"say \"\"hi\"\", ok\"\n2,\"two\nlines\"\n";
        let d = parse(text).unwrap();
        assert_eq!(d.feature_names(), ["a,b"]);
        assert_eq!(d.features().to_vec::<f32>().unwrap(), [1.5, 2.0]);
        assert_eq!(d.class_names().unwrap(), ["say \"hi\", ok", "two\nlines"]);
    }

    #[test]
    fn crlf_line_ends_and_blank_trailing_lines_are_accepted() {
        let d = parse("x,species\r\n1,a\r\n2,b\r\n\r\n\n\n").unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d.class_names().unwrap(), ["a", "b"]);
        let no_final_newline = parse("x,species\n1,a\n2,b").unwrap();
        assert_eq!(no_final_newline.len(), 2);
    }

    #[test]
    fn lone_carriage_returns_end_lines_too() {
        let d = parse("x,species\r1,a\r2,b\r").unwrap();
        assert_eq!(d.targets().to_vec::<i64>().unwrap(), [0, 1]);
    }

    #[test]
    fn a_non_numeric_feature_names_its_row_and_column() {
        let err = parse("x,species,y\n1,a,2\n3,b,oops\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("row 2")
                && err.contains("line 3")
                && err.contains("\"y\"")
                && err.contains("oops"),
            "{err}"
        );
        let empty = parse("x,species\n,a\n").unwrap_err().to_string();
        assert!(
            empty.contains("row 1") && empty.contains("empty"),
            "{empty}"
        );
    }

    #[test]
    fn non_finite_numbers_are_kept_and_counted_with_the_first_position() {
        let text = b"x,y,species\n1,2,a\n3,NaN,b\ninf,1e999,a\n4,5,b\n";
        let opts = CsvOptions::classification("species");
        let (d, non_finite) = super::parse(text, &opts).unwrap();
        assert!(d.features().to_vec::<f32>().unwrap()[3].is_nan());
        let note = non_finite.note("iris.csv").unwrap();
        assert!(
            note.starts_with("iris.csv:3:2: 3 values are not finite"),
            "{note}"
        );
        assert!(note.contains("\"NaN\" in column \"y\""), "{note}");
        let (_, clean) = super::parse(b"x,species\n1,a\n", &opts).unwrap();
        assert!(clean.note("iris.csv").is_none());
        // A regression target counts too.
        let (_, target) = super::parse(b"x,y\n1,-inf\n", &CsvOptions::regression("y")).unwrap();
        assert!(target
            .note("t.csv")
            .unwrap()
            .starts_with("t.csv:2:2: 1 value is"));
    }

    #[test]
    fn a_row_with_the_wrong_field_count_is_an_error() {
        let err = parse("x,species\n1,a\n2,b,3\n").unwrap_err().to_string();
        assert!(err.contains("row 2") && err.contains("3 fields"), "{err}");
    }

    #[test]
    fn a_missing_or_repeated_label_column_is_an_error() {
        assert!(parse("x,y\n1,2\n")
            .unwrap_err()
            .to_string()
            .contains("species"));
        assert!(parse("species,species\n1,2\n").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn broken_quoting_is_an_error() {
        assert!(parse("x,species\n1,\"never closed\n").is_err());
        assert!(parse("x,species\n1,\"a\"b\n").is_err());
    }

    #[test]
    fn a_header_without_rows_gives_an_empty_dataset() {
        let d = parse("x,y,species\n").unwrap();
        assert_eq!(d.features().shape(), &[0, 2]);
        assert!(d.is_empty());
    }

    #[test]
    fn from_csv_reads_a_file() {
        let path = std::env::temp_dir().join(format!("rb_csv_{}.csv", std::process::id()));
        std::fs::write(&path, "x,label\n1,a\n").unwrap();
        let d = Dataset::from_csv(&path, "label").unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(d.len(), 1);
        assert!(Dataset::from_csv(&path, "label").is_err());
    }

    #[test]
    fn a_bad_csv_file_is_named_in_the_error() {
        let path = std::env::temp_dir().join(format!("rb_csv_bad_{}.csv", std::process::id()));
        std::fs::write(&path, "x,label\n1,a,extra\n").unwrap();
        let err = Dataset::from_csv(&path, "label").err().unwrap().to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(
            err.starts_with(&format!("csv: {}: row 1", path.display())),
            "{err}"
        );
    }
}
