//! `plot::confusion_matrix(cm, path, #{ classes, title, normalize })`: a confusion matrix from
//! `metrics::confusion_matrix` drawn as a heatmap, rows the true class and columns the
//! predicted one, as scikit-learn's `ConfusionMatrixDisplay` draws it. Normalizing is the
//! engine's (`metrics::normalize_confusion`); this converts and draws.

use std::path::PathBuf;

use rhai::{Dynamic, Map, Module};
use rusting_brain::metrics::{normalize_confusion, Normalize};
use rusting_brain::Tensor;

use super::rhai_api::{
    finish, labels_from_dynamic, parse_options, prefixed, script_error, ScriptResult,
};
use super::{heatmap, AxisNames};
use crate::help::Api;

const NAME: &str = "plot::confusion_matrix";

pub(super) fn register(module: &mut Module) {
    let mut api = Api::new(module, Some("plot"));
    api.func(
        "confusion_matrix",
        "plot::confusion_matrix(cm, path) -> path",
        "Draws a confusion matrix [C, C] (rows true, columns predicted) as a PNG heatmap with counts.",
        "let cm = metrics::confusion_matrix(tensor([0, 1, 1, 2]), tensor([0, 1, 2, 2])); plot::confusion_matrix(cm, \"cm.png\")",
        |cm: Dynamic, path: &str| confusion_matrix(cm, path, Map::new()),
    );
    api.func(
        "confusion_matrix",
        "plot::confusion_matrix(cm, path, #{ classes, title, normalize, xlabel, ylabel, width, height }) -> path",
        "The confusion matrix with class names; normalize: true or \"true\" (rows sum to 1), \"pred\" (columns), \"all\".",
        "let cm = metrics::confusion_matrix(tensor([0, 1, 1, 2]), tensor([0, 1, 2, 2])); plot::confusion_matrix(cm, \"cm.png\", #{ classes: [\"cat\", \"dog\", \"bird\"], normalize: true })",
        confusion_matrix,
    );
}

fn confusion_matrix(cm: Dynamic, path: &str, opts: Map) -> ScriptResult<String> {
    let (mut options, extra) = parse_options(NAME, &opts, &["classes", "normalize"])?;
    if opts.contains_key("path") {
        return Err(script_error(format!(
            "{NAME}: the path is the second argument, not an option"
        )));
    }
    let Some(cm) = cm.read_lock::<Tensor>().map(|t| t.clone()) else {
        return Err(script_error(format!(
            "{NAME}: cm must be a tensor [classes, classes] (metrics::confusion_matrix), not {}",
            cm.type_name()
        )));
    };
    let shape = cm.shape().to_vec();
    if shape.len() != 2 || shape[0] != shape[1] || shape[0] == 0 {
        return Err(script_error(format!(
            "{NAME}: cm must be a square matrix [classes, classes], got shape {shape:?}"
        )));
    }
    let mut names = Vec::new();
    let mut normalize = None;
    for (key, value) in extra {
        match key {
            "classes" => names = labels_from_dynamic(value).map_err(|e| prefixed(NAME, e))?,
            _ => normalize = normalize_of(value)?,
        }
    }
    if !names.is_empty() && names.len() != shape[0] {
        return Err(script_error(format!(
            "{NAME}: {} class names for a matrix of {} classes",
            names.len(),
            shape[0]
        )));
    }
    let cm = match normalize {
        Some(how) => crate::error::guard(|| normalize_confusion(&cm, how))?,
        None => cm,
    };
    let values = crate::error::guard(|| cm.to_vec_f64())?;
    let rows: Vec<Vec<f64>> = values.chunks(shape[1]).map(<[f64]>::to_vec).collect();
    options.path = PathBuf::from(path);
    options.title.get_or_insert_with(|| {
        if normalize.is_some() {
            "Confusion Matrix Normalized"
        } else {
            "Confusion Matrix"
        }
        .into()
    });
    options.xlabel.get_or_insert_with(|| "Predicted".into());
    options.ylabel.get_or_insert_with(|| "True".into());
    if !opts.contains_key("width") && !opts.contains_key("height") {
        (options.width, options.height) = (700, 640);
    }
    let axis = AxisNames {
        rows: names.clone(),
        columns: names,
    };
    finish(NAME, heatmap(&rows, &axis, &options))
}

/// scikit-learn's `normalize=` values; `true` means "true" (each true class's row sums to 1).
fn normalize_of(value: &Dynamic) -> ScriptResult<Option<Normalize>> {
    if let Ok(on) = value.as_bool() {
        return Ok(on.then_some(Normalize::Rows));
    }
    match value.clone().into_string().as_deref() {
        Ok("true") => Ok(Some(Normalize::Rows)),
        Ok("pred") => Ok(Some(Normalize::Columns)),
        Ok("all") => Ok(Some(Normalize::All)),
        _ => Err(script_error(format!(
            "{NAME}: normalize must be true, false, \"true\" (rows), \"pred\" (columns) or \"all\", not {value}"
        ))),
    }
}
