//! How datasets print (`print(ds)` in a script): size, features, classes and dtypes on one
//! line, e.g. `Dataset(150 rows, 4 features [sepal_length, ...], 3 classes [setosa, ...],
//! features f32, targets i64)`.

use super::yolo::YoloDataset;
use super::{Dataset, TokenFile, TokenSpan};
use crate::nn::with_commas;
use std::fmt;

/// Names shown before a list is cut short.
const SHOWN_NAMES: usize = 8;

/// `[a, b, c]`, or `[a, ..., h, ... 12 more]` past `SHOWN_NAMES`.
fn name_list(names: &[String]) -> String {
    let mut shown: Vec<&str> = names.iter().take(SHOWN_NAMES).map(String::as_str).collect();
    let more = names.len().saturating_sub(SHOWN_NAMES);
    let tail = format!("... {more} more");
    if more > 0 {
        shown.push(&tail);
    }
    format!("[{}]", shown.join(", "))
}

/// Feature names are worth printing unless they are the `x0, x1, ...` given by default.
fn named_features(ds: &Dataset) -> bool {
    ds.feature_names()
        .iter()
        .enumerate()
        .any(|(i, n)| *n != format!("x{i}"))
}

impl fmt::Display for Dataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Dataset({} rows, {} features",
            with_commas(self.len()),
            with_commas(self.num_features())
        )?;
        if named_features(self) {
            write!(f, " {}", name_list(self.feature_names()))?;
        }
        match (self.class_names(), self.num_classes()) {
            (Some(names), _) => write!(f, ", {} classes {}", names.len(), name_list(names))?,
            (None, Ok(Some(n))) => write!(f, ", {n} classes")?,
            (None, Ok(None)) => write!(f, ", regression")?,
            (None, Err(_)) => {}
        }
        write!(
            f,
            ", features {}, targets {})",
            self.features().dtype(),
            self.targets().dtype()
        )
    }
}

impl fmt::Display for TokenSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TokenSpan({} tokens from {}, vocab {})",
            with_commas(self.len() as usize),
            with_commas(self.offset() as usize),
            with_commas(self.vocab_size())
        )
    }
}

impl fmt::Display for TokenFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TokenFile({}, {} tokens, vocab {})",
            self.path().display(),
            with_commas(self.len() as usize),
            with_commas(self.vocab_size())
        )
    }
}

impl fmt::Display for YoloDataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let boxes: usize = self.images.iter().map(|i| i.labels.len()).sum();
        write!(
            f,
            "YoloDataset({} images, {} boxes, {} classes {})",
            with_commas(self.images.len()),
            with_commas(boxes),
            self.names.len(),
            name_list(&self.names)
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::data::Dataset;
    use crate::Tensor;

    fn iris_like() -> Dataset {
        let x = Tensor::from_vec(vec![0f32; 6 * 4], &[6, 4]).unwrap();
        let y = Tensor::from_vec(vec![0i64, 1, 2, 0, 1, 2], &[6]).unwrap();
        Dataset::new(x, y).unwrap()
    }

    #[test]
    fn a_dataset_prints_rows_features_classes_and_dtypes() {
        let named = iris_like()
            .with_feature_names(
                ["sepal_length", "sepal_width", "petal_length", "petal_width"]
                    .map(String::from)
                    .to_vec(),
            )
            .unwrap()
            .with_class_names(
                ["setosa", "versicolor", "virginica"]
                    .map(String::from)
                    .to_vec(),
            )
            .unwrap();
        assert_eq!(
            named.to_string(),
            "Dataset(6 rows, 4 features [sepal_length, sepal_width, petal_length, petal_width], \
             3 classes [setosa, versicolor, virginica], features f32, targets i64)"
        );
        assert_eq!(
            iris_like().to_string(),
            "Dataset(6 rows, 4 features, 3 classes, features f32, targets i64)"
        );
    }

    #[test]
    fn long_name_lists_are_cut_short_and_regression_says_so() {
        let x = Tensor::from_vec(vec![0f32; 2 * 10], &[2, 10]).unwrap();
        let y = Tensor::from_vec(vec![0.5f32, 1.5], &[2]).unwrap();
        let names = (0..10).map(|i| format!("f{i}")).collect();
        let ds = Dataset::new(x, y)
            .unwrap()
            .with_feature_names(names)
            .unwrap();
        assert_eq!(
            ds.to_string(),
            "Dataset(2 rows, 10 features [f0, f1, f2, f3, f4, f5, f6, f7, ... 2 more], \
             regression, features f32, targets f32)"
        );
    }
}
