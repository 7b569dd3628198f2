//! The `metrics::` namespace: classification metrics from the engine's `metrics` module
//! (accuracy, confusion matrix, precision/recall/F1 as scikit-learn computes them). Predictions
//! are class ids `[N]` or scores `[N, C]` (argmax taken by the engine); targets class ids `[N]`.

use crate::error::{guard, RhaiResult};
use crate::help::Api;
use rhai::{Array, Dynamic, Engine, Map, Module, FLOAT, INT};
use rusting_brain::metrics::{self, PrecisionRecallF1};
use rusting_brain::Tensor;

fn floats(v: &[f64]) -> Array {
    v.iter().map(|&x| Dynamic::from_float(x as FLOAT)).collect()
}

fn classes_of(n: INT) -> RhaiResult<Option<usize>> {
    crate::convert::usize_of(n, "num_classes").map(Some)
}

/// The report as a map of per-class arrays and averaged floats.
fn report_map(r: PrecisionRecallF1) -> Map {
    let mut m = Map::new();
    m.insert("precision".into(), floats(&r.precision).into());
    m.insert("recall".into(), floats(&r.recall).into());
    m.insert("f1".into(), floats(&r.f1).into());
    let support: Array = r
        .support
        .iter()
        .map(|&s| Dynamic::from_int(s as INT))
        .collect();
    m.insert("support".into(), support.into());
    for (key, value) in [
        ("macro_precision", r.macro_precision),
        ("macro_recall", r.macro_recall),
        ("macro_f1", r.macro_f1),
        ("weighted_precision", r.weighted_precision),
        ("weighted_recall", r.weighted_recall),
        ("weighted_f1", r.weighted_f1),
    ] {
        m.insert(key.into(), Dynamic::from_float(value as FLOAT));
    }
    m
}

pub fn register(engine: &mut Engine) {
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("metrics"));
        api.func(
            "accuracy",
            "metrics::accuracy(pred, target) -> float",
            "The fraction of correct predictions; pred is class ids [N] or scores [N, C].",
            "let logits = tensor([[2.0, 0.1], [0.3, 0.9], [1.0, 0.0]]); metrics::accuracy(logits, tensor([0, 1, 1]))",
            |p: Tensor, t: Tensor| guard(|| metrics::accuracy(&p, &t)),
        );
        api.func(
            "confusion_matrix",
            "metrics::confusion_matrix(pred, target) -> Tensor",
            "Counts [C, C] (i64): row = true class, column = predicted, as scikit-learn; C from the scores or the largest id.",
            "let cm = metrics::confusion_matrix(tensor([0, 1, 1, 2]), tensor([0, 1, 2, 2])); print(cm)",
            |p: Tensor, t: Tensor| guard(|| metrics::confusion_matrix(&p, &t, None)),
        );
        api.func(
            "confusion_matrix",
            "metrics::confusion_matrix(pred, target, num_classes) -> Tensor",
            "The confusion matrix over num_classes classes (classes that never occur get zero rows and columns).",
            "metrics::confusion_matrix(tensor([0, 1]), tensor([0, 0]), 3)",
            |p: Tensor, t: Tensor, n: INT| {
                let n = classes_of(n)?;
                guard(|| metrics::confusion_matrix(&p, &t, n))
            },
        );
        api.func(
            "precision_recall_f1",
            "metrics::precision_recall_f1(pred, target) -> #{ precision, recall, f1, support, macro_precision, macro_recall, macro_f1, weighted_precision, weighted_recall, weighted_f1 }",
            "Per-class precision, recall, F1 and support with macro and weighted means, as scikit-learn (zero_division = 0).",
            "let r = metrics::precision_recall_f1(tensor([0, 1, 1, 2]), tensor([0, 1, 2, 2])); print(r.f1); print(r.macro_f1)",
            |p: Tensor, t: Tensor| {
                guard(|| metrics::precision_recall_f1(&p, &t, None)).map(report_map)
            },
        );
        api.func(
            "precision_recall_f1",
            "metrics::precision_recall_f1(pred, target, num_classes) -> map",
            "precision_recall_f1 over num_classes classes; a class in neither tensor counts as 0 in the macro means.",
            "let r = metrics::precision_recall_f1(tensor([0, 1]), tensor([0, 1]), 3); r.macro_f1",
            |p: Tensor, t: Tensor, n: INT| {
                let n = classes_of(n)?;
                guard(|| metrics::precision_recall_f1(&p, &t, n)).map(report_map)
            },
        );
    }
    engine.register_static_module("metrics", module.into());
}
