//! How script values print: `print(model)`, the REPL's echo and `:vars` go through the
//! `to_string` and `to_debug` registered here. The text itself is the engine's (`nn::describe`,
//! the data types' `Display`); this file only connects each type to it.

use crate::data::ImageDataset;
use crate::help::{with_tokens, Api};
use crate::lm::Lm;
use crate::nn::Model;
use crate::progress::short_numbers::sig;
use crate::yolo::Yolo;
use rhai::{Engine, Module};
use rusting_brain::data::{Dataset, TokenFile, TokenSpan};
use rusting_brain::nn::describe;

/// Registers `to_string` and `to_debug` (the same text) for one type.
fn both<T: rhai::Variant + Clone>(
    api: &mut Api,
    receiver: &str,
    doc: &str,
    example: &str,
    text: fn(&mut T) -> String,
) {
    api.method(
        "to_string",
        &format!("{receiver}.to_string() -> string"),
        doc,
        example,
        text,
    );
    api.method(
        "to_debug",
        &format!("{receiver}.to_debug() -> string"),
        "Same as to_string.",
        example,
        text,
    );
}

pub fn register(engine: &mut Engine) {
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, None);
        both(
            &mut api,
            "model",
            "The module tree, one line per layer with its parameter count, and the total (what print(model) shows).",
            "let model = nn::mlp([4, 64, 3]); print(model)",
            |m: &mut Model| describe(&**m.lock()),
        );
        both(
            &mut api,
            "model",
            "The language model's tree in Hugging Face's names, its decoder layers folded, and the total.",
            crate::help::with_lm!("print(model)"),
            |m: &mut Lm| describe(&*m.lock()),
        );
        both(
            &mut api,
            "model",
            "The detector in one line (scale, layers, classes) and its parameter count.",
            "let model = yolo::model(\"yolo11n.yaml\", #{ classes: 2 }); print(model)",
            |m: &mut Yolo| describe(&*m.lock()),
        );
        both(
            &mut api,
            "ds",
            "Rows, features (with their names), classes (with their names) and dtypes on one line.",
            "let ds = data::spirals(20, #{ seed: 1 }); print(ds)",
            |d: &mut Dataset| d.to_string(),
        );
        both(
            &mut api,
            "ds",
            "The images, boxes and classes of a detection split.",
            "let path = data::yolo_shapes(\"shapes\", #{ train: 2, val: 2, imgsz: 64 }); print(data::yolo_images(path, \"val\"))",
            |d: &mut ImageDataset| d.to_string(),
        );
        both(
            &mut api,
            "tokens",
            "The file, its token count and vocab size.",
            with_tokens!("print(tokens)"),
            |t: &mut TokenFile| t.to_string(),
        );
        both(
            &mut api,
            "span",
            "The span's token count, offset and vocab size.",
            with_tokens!("print(train)"),
            |t: &mut TokenSpan| t.to_string(),
        );
        api.func(
            "fmt",
            "fmt(x) -> string",
            "x with 4 significant digits, as Python's f\"{x:.4g}\" (a loss or a metric in a log line: 2.303, not 2.3025850929940455).",
            "print(`loss ${fmt(2.3025850929940455)}`)",
            |x: f64| sig(x, 4),
        );
        api.func(
            "fmt",
            "fmt(x, digits) -> string",
            "x with `digits` significant digits, as Python's f\"{x:.{digits}g}\".",
            "print(fmt(3.14159265, 3))",
            |x: f64, digits: rhai::INT| sig(x, digits.max(1) as usize),
        );
        api.func(
            "fmt",
            "fmt(n) -> string",
            "An integer as it is.",
            "print(fmt(42))",
            |n: rhai::INT| n.to_string(),
        );
    }
    engine.register_global_module(module.into());
}
