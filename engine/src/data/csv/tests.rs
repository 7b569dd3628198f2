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
    let refuse = CsvOptions {
        empty_is_nan: false,
        ..CsvOptions::classification("species")
    };
    let empty = parse_csv(b"x,species\n,a\n", &refuse)
        .unwrap_err()
        .to_string();
    assert!(
        empty.contains("row 1") && empty.contains("empty"),
        "{empty}"
    );
}

/// pandas reads an empty cell as NaN; so do we by default, with a warning naming the first.
#[test]
fn empty_cells_are_nan_with_a_warning_naming_the_first() {
    let opts = CsvOptions::classification("species");
    let (d, notes) = super::parse(b"x,z,species\n1,2,a\n3,,b\n,4,a\n", &opts).unwrap();
    let values = d.features().to_vec::<f32>().unwrap();
    assert!(
        values[3].is_nan() && values[4].is_nan() && values[0] == 1.0,
        "{values:?}"
    );
    let lines = notes.lines("t.csv");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("t.csv:3:2: 2 empty cells read as NaN") && lines[0].contains("\"z\""),
        "{}",
        lines[0]
    );
}

/// A label column of many distinct numbers is read as classes, with a warning that offers the
/// regression reading; read as regression, it is numbers.
#[test]
fn a_label_column_of_many_numbers_warns_and_reads_as_regression_when_asked() {
    let text: String = std::iter::once("x,y\n".to_string())
        .chain((0..30).map(|i| format!("{i},{}.5\n", i * 3)))
        .collect();
    let (d, notes) = super::parse(text.as_bytes(), &CsvOptions::classification("y")).unwrap();
    assert_eq!(d.class_names().unwrap().len(), 30);
    let lines = notes.lines("t.csv");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("30 distinct numbers") && l.contains("task: \"regression\"")),
        "{lines:?}"
    );
    let (r, _) = super::parse(text.as_bytes(), &CsvOptions::regression("y")).unwrap();
    assert_eq!(r.targets().to_vec::<f32>().unwrap()[1], 3.5);
    let (_, few) = super::parse(b"x,y\n1,0\n2,1\n", &CsvOptions::classification("y")).unwrap();
    assert!(few.lines("t.csv").is_empty());
}

#[test]
fn non_finite_numbers_are_kept_and_counted_with_the_first_position() {
    let text = b"x,y,species\n1,2,a\n3,NaN,b\ninf,1e999,a\n4,5,b\n";
    let opts = CsvOptions::classification("species");
    let (d, notes) = super::parse(text, &opts).unwrap();
    assert!(d.features().to_vec::<f32>().unwrap()[3].is_nan());
    let note = notes.non_finite.note("iris.csv").unwrap();
    assert!(
        note.starts_with("iris.csv:3:2: 3 values are not finite"),
        "{note}"
    );
    assert!(note.contains("\"NaN\" in column \"y\""), "{note}");
    let (_, clean) = super::parse(b"x,species\n1,a\n", &opts).unwrap();
    assert!(clean.lines("iris.csv").is_empty());
    // A regression target counts too.
    let (_, target) = super::parse(b"x,y\n1,-inf\n", &CsvOptions::regression("y")).unwrap();
    assert!(target.lines("t.csv")[0].starts_with("t.csv:2:2: 1 value is"));
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
