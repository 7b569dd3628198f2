//! The `plot` Rhai module: converts script values into the rendering layer's inputs.
//!
//! ```rhai
//! plot::line(losses, #{ title: "loss", smooth: 0.9, path: "out/loss.png" });
//! plot::line(#{ train: train_loss, val: val_loss }, #{ log_y: true });
//! plot::scatter(xs, ys, #{ labels: classes });
//! plot::hist(weights, #{ bins: 50 });
//! ```

use std::path::PathBuf;

use rhai::{Array, Dynamic, Engine, EvalAltResult, FuncRegistration, Map, Module, Position};
use rusting_brain::Tensor;

use super::{PlotError, PlotOptions};

pub(super) type ScriptResult<T> = Result<T, Box<EvalAltResult>>;

/// Options every chart takes.
const COMMON_KEYS: [&str; 7] = [
    "title", "xlabel", "ylabel", "path", "width", "height", "log_y",
];

/// Registers the static module `plot` (`plot::line`, `plot::scatter`, `plot::hist`,
/// `plot::confusion_matrix`).
pub fn register(engine: &mut Engine) {
    for (name, signature, doc, example) in [
        ("plot::line", "plot::line(ys | #{ name: ys }, #{ title, xlabel, ylabel, path, width, height, smooth, log_y, xs }) -> path", "A PNG line chart of one list or several named lists (with a legend).", "let losses = [3.2, 2.5, 2.1, 1.9]; plot::line(losses, #{ title: \"loss\", smooth: 0.9, path: \"loss.png\" })"),
        ("plot::scatter", "plot::scatter(xs, ys, #{ labels, title, xlabel, ylabel, path, width, height, log_y }) -> path", "A PNG scatter plot; per-point labels color the classes.", "let x0 = [0.1, 0.5, 0.9]; let x1 = [1.0, 0.2, 0.4]; let names = [\"a\", \"b\", \"a\"]; plot::scatter(x0, x1, #{ labels: names, path: \"points.png\" })"),
        ("plot::hist", "plot::hist(values, #{ bins, title, xlabel, ylabel, path, width, height, log_y }) -> path", "A PNG histogram.", "let w = randn([10, 10]); plot::hist(w.flatten(), #{ bins: 50 })"),
    ] {
        crate::help::record_entry(name, signature, doc, example);
    }
    let mut module = Module::new();
    let line_doc = "/// Draws a line chart of a list (x = index) or of several named lists \
                    (a map name -> list, with a legend) and returns the PNG path.\n\
                    /// Options: title, xlabel, ylabel, path (\"plot.png\"), width (800), \
                    height (500), smooth (moving-average weight 0..1), log_y, xs.\n\
                    /// Example: `plot::line(losses, #{ title: \"loss\", path: \"loss.png\" })`";
    crate::error::set_into_module(
        FuncRegistration::new("line")
            .with_comments([line_doc])
            .with_params_info(["ys: Array | Map | Tensor", "String"]),
        &mut module,
        |ys: Dynamic| line(ys, Map::new()),
    );
    crate::error::set_into_module(
        FuncRegistration::new("line")
            .with_comments([line_doc])
            .with_params_info(["ys: Array | Map | Tensor", "opts: Map", "String"]),
        &mut module,
        line,
    );
    let scatter_doc = "/// Draws a scatter chart of the points (xs[i], ys[i]) and returns the PNG path.\n\
                       /// Options: title, xlabel, ylabel, path, width, height, log_y, \
                       labels (one class per point: colors and a legend).\n\
                       /// Example: `plot::scatter(xs, ys, #{ labels: classes, path: \"points.png\" })`";
    crate::error::set_into_module(
        FuncRegistration::new("scatter")
            .with_comments([scatter_doc])
            .with_params_info(["xs: Array | Tensor", "ys: Array | Tensor", "String"]),
        &mut module,
        |xs: Dynamic, ys: Dynamic| scatter(xs, ys, Map::new()),
    );
    crate::error::set_into_module(
        FuncRegistration::new("scatter")
            .with_comments([scatter_doc])
            .with_params_info([
                "xs: Array | Tensor",
                "ys: Array | Tensor",
                "opts: Map",
                "String",
            ]),
        &mut module,
        scatter,
    );
    let hist_doc = "/// Draws a histogram of the values and returns the PNG path.\n\
                    /// Options: title, xlabel, ylabel, path, width, height, log_y, bins (30).\n\
                    /// Example: `plot::hist(weights, #{ bins: 50, path: \"weights.png\" })`";
    crate::error::set_into_module(
        FuncRegistration::new("hist")
            .with_comments([hist_doc])
            .with_params_info(["values: Array | Tensor", "String"]),
        &mut module,
        |values: Dynamic| hist(values, Map::new()),
    );
    crate::error::set_into_module(
        FuncRegistration::new("hist")
            .with_comments([hist_doc])
            .with_params_info(["values: Array | Tensor", "opts: Map", "String"]),
        &mut module,
        hist,
    );
    super::confusion_api::register(&mut module);
    engine.register_static_module("plot", module.into());
}

fn line(ys: Dynamic, opts: Map) -> ScriptResult<String> {
    const NAME: &str = "plot::line";
    let (options, extra) = parse_options(NAME, &opts, &["smooth", "xs"])?;
    let xs = match extra.iter().find(|(k, _)| *k == "xs") {
        Some((_, xs)) => Some(values_from_dynamic(xs, "xs").map_err(|e| prefixed(NAME, e))?),
        None => None,
    };
    let series = match ys.read_lock::<Map>() {
        Some(map) => map
            .iter()
            .map(|(name, values)| {
                let what = format!("series '{name}'");
                Ok((name.to_string(), values_from_dynamic(values, &what)?))
            })
            .collect::<ScriptResult<Vec<_>>>(),
        None => values_from_dynamic(&ys, "ys").map(|v| vec![("ys".to_string(), v)]),
    }
    .map_err(|e| prefixed(NAME, e))?;
    let written = match xs {
        Some(xs) => super::line_xy(&xs, &series, &options),
        None => super::line(&series, &options),
    };
    finish(NAME, written)
}

fn scatter(xs: Dynamic, ys: Dynamic, opts: Map) -> ScriptResult<String> {
    const NAME: &str = "plot::scatter";
    let (options, extra) = parse_options(NAME, &opts, &["labels"])?;
    let xs = values_from_dynamic(&xs, "xs").map_err(|e| prefixed(NAME, e))?;
    let ys = values_from_dynamic(&ys, "ys").map_err(|e| prefixed(NAME, e))?;
    let labels = match extra.iter().find(|(k, _)| *k == "labels") {
        Some((_, labels)) => Some(labels_from_dynamic(labels).map_err(|e| prefixed(NAME, e))?),
        None => None,
    };
    finish(NAME, super::scatter(&xs, &ys, labels.as_deref(), &options))
}

fn hist(values: Dynamic, opts: Map) -> ScriptResult<String> {
    const NAME: &str = "plot::hist";
    let (options, extra) = parse_options(NAME, &opts, &["bins"])?;
    let values = values_from_dynamic(&values, "values").map_err(|e| prefixed(NAME, e))?;
    let bins = match extra.iter().find(|(k, _)| *k == "bins") {
        Some((_, bins)) => match bins.as_int() {
            Ok(n) if n > 0 => n as usize,
            _ => {
                return Err(script_error(format!(
                    "{NAME}: bins must be a positive integer"
                )))
            }
        },
        None => super::DEFAULT_BINS,
    };
    finish(NAME, super::hist(&values, bins, &options))
}

/// Turns a script value into numbers: an array of INT/FLOAT, or a tensor (flattened).
/// This is the one place to teach plots about a new plottable type. `what` names the
/// value in errors, e.g. "ys[3] is a string, not a number".
pub fn values_from_dynamic(value: &Dynamic, what: &str) -> ScriptResult<Vec<f64>> {
    if let Some(tensor) = value.read_lock::<Tensor>() {
        return tensor
            .to_vec_f64()
            .map_err(|e| script_error(format!("{what}: {e}")));
    }
    let Some(array) = value.read_lock::<Array>() else {
        return Err(script_error(format!(
            "{what} must be an array of numbers or a tensor, not {}",
            value.type_name()
        )));
    };
    array
        .iter()
        .enumerate()
        .map(|(i, v)| {
            number(v).ok_or_else(|| {
                script_error(format!("{what}[{i}] is {}, not a number", v.type_name()))
            })
        })
        .collect()
}

fn number(value: &Dynamic) -> Option<f64> {
    value
        .as_float()
        .ok()
        .or_else(|| value.as_int().ok().map(|i| i as f64))
}

/// Class labels: strings, or anything else shown as text (e.g. INT class ids).
pub(super) fn labels_from_dynamic(value: &Dynamic) -> ScriptResult<Vec<String>> {
    if let Some(tensor) = value.read_lock::<Tensor>() {
        let values = tensor
            .to_vec_f64()
            .map_err(|e| script_error(format!("labels: {e}")))?;
        return Ok(values.iter().map(|v| v.to_string()).collect());
    }
    match value.read_lock::<Array>() {
        Some(array) => Ok(array.iter().map(|v| v.to_string()).collect()),
        None => Err(script_error(format!(
            "labels must be an array, not {}",
            value.type_name()
        ))),
    }
}

/// Splits `opts` into the common options and the function's own keys (`extra`);
/// any other key is an error listing the valid ones.
pub(super) fn parse_options<'m>(
    name: &str,
    opts: &'m Map,
    extra: &[&str],
) -> ScriptResult<(PlotOptions, Vec<(&'m str, &'m Dynamic)>)> {
    let mut options = PlotOptions::default();
    let mut own = Vec::new();
    for (key, value) in opts {
        let key = key.as_str();
        let bad = |expected: &str| {
            script_error(format!(
                "{name}: option '{key}' must be {expected}, not {}",
                value.type_name()
            ))
        };
        let text = || value.clone().into_string().map_err(|_| bad("a string"));
        let size = || match value.as_int() {
            Ok(n) => u32::try_from(n).map_err(|_| bad("a positive integer")),
            Err(_) => Err(bad("an integer")),
        };
        match key {
            "title" => options.title = Some(text()?),
            "xlabel" => options.xlabel = Some(text()?),
            "ylabel" => options.ylabel = Some(text()?),
            "path" => options.path = PathBuf::from(text()?),
            "width" => options.width = size()?,
            "height" => options.height = size()?,
            "log_y" => options.log_y = value.as_bool().map_err(|_| bad("true or false"))?,
            "smooth" if extra.contains(&"smooth") => {
                options.smooth = Some(number(value).ok_or_else(|| bad("a number"))?)
            }
            _ if extra.contains(&key) => own.push((key, value)),
            _ => {
                let valid: Vec<&str> = COMMON_KEYS.iter().chain(extra).copied().collect();
                return Err(script_error(format!(
                    "{name}: unknown option '{key}'; valid options are: {}",
                    valid.join(", ")
                )));
            }
        }
    }
    Ok((options, own))
}

pub(super) fn finish(name: &str, written: Result<PathBuf, PlotError>) -> ScriptResult<String> {
    written
        .map(|path| path.display().to_string())
        .map_err(|e| script_error(format!("{name}: {e}")))
}

pub(super) fn prefixed(name: &str, mut error: Box<EvalAltResult>) -> Box<EvalAltResult> {
    if let EvalAltResult::ErrorRuntime(message, _) = &mut *error {
        *message = format!("{name}: {message}").into();
    }
    error
}

pub(super) fn script_error(message: String) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(message.into(), Position::NONE))
}
