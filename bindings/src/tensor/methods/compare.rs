//! Comparisons as bool tensors, elementwise maximum and minimum, and selection by a mask.

use crate::convert;
use crate::error::guard;
use crate::help::Api;
use crate::tensor::operand;
use rhai::Dynamic;
use rusting_brain::Tensor;

pub fn register(api: &mut Api) {
    register_maximum_minimum(api);
    register_comparisons(api);
    register_selection(api);
}

fn register_maximum_minimum(api: &mut Api) {
    for (name, doc) in [
        (
            "maximum",
            "Elementwise maximum of two tensors (broadcasting).",
        ),
        (
            "minimum",
            "Elementwise minimum of two tensors (broadcasting).",
        ),
    ] {
        let is_max = name == "maximum";
        api.func(
            name,
            &format!("a.{name}(b) -> Tensor"),
            doc,
            &format!("let a = randn([3]); let b = zeros([3]); a.{name}(b)"),
            move |a: &mut Tensor, b: Dynamic| {
                let b = operand(&b, a)?;
                guard(|| if is_max { a.maximum(&b) } else { a.minimum(&b) })
            },
        );
    }
}

fn register_comparisons(api: &mut Api) {
    for (name, doc) in [
        ("eq", "=="),
        ("ne", "!="),
        ("lt", "<"),
        ("le", "<="),
        ("gt", ">"),
        ("ge", ">="),
    ] {
        let n = name;
        api.func(
            name,
            &format!("a.{name}(b) -> Tensor"),
            &format!("Elementwise a {doc} b as a bool tensor."),
            &format!("let x = randn([3]); x.{name}(0.0)"),
            move |a: &mut Tensor, b: Dynamic| {
                let b = operand(&b, a)?;
                guard(|| match n {
                    "eq" => a.eq(&b),
                    "ne" => a.ne(&b),
                    "lt" => a.lt(&b),
                    "le" => a.le(&b),
                    "gt" => a.gt(&b),
                    _ => a.ge(&b),
                })
            },
        );
    }
}

fn register_selection(api: &mut Api) {
    api.func(
        "where",
        "where(cond, a, b) -> Tensor",
        "Elements of a where cond is true, else of b (broadcasting; numbers allowed).",
        "let x = randn([4]); where(x.gt(0.0), x, 0.0)",
        |cond: Tensor, a: Dynamic, b: Dynamic| {
            let like = a
                .clone()
                .try_cast::<Tensor>()
                .or_else(|| b.clone().try_cast::<Tensor>())
                .unwrap_or_else(|| cond.clone());
            let (a, b) = (operand(&a, &like)?, operand(&b, &like)?);
            guard(|| Tensor::where_cond(&cond, &a, &b))
        },
    );
    api.func(
        "masked_fill",
        "t.masked_fill(mask, value) -> Tensor",
        "value where mask is true, t elsewhere.",
        "let scores = randn([2, 2]); let mask = tensor([[false, true], [false, false]]); scores.masked_fill(mask, -1e9)",
        |t: &mut Tensor, m: Tensor, v: Dynamic| {
            let v = convert::number(&v, "masked_fill")?;
            guard(|| t.masked_fill(&m, v))
        },
    );
}
