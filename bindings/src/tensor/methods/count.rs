//! Values and classes: unique, bincount and one_hot.

use crate::error::{guard, RhaiResult};
use crate::help::Api;
use rhai::{Dynamic, Map, INT};
use rusting_brain::Tensor;

pub fn register(api: &mut Api) {
    api.func(
        "unique",
        "t.unique() -> Tensor",
        "The distinct values of the flattened tensor, sorted (each NaN is its own value).",
        "tensor([3, 1, 3, 2, 1]).unique()",
        |t: &mut Tensor| guard(|| t.unique()),
    );
    api.func(
        "unique_counts",
        "t.unique_counts() -> #{ values, counts }",
        "The sorted distinct values and how often each occurs (torch.unique(return_counts=True)).",
        "let u = tensor([3, 1, 3, 2, 1]).unique_counts(); print(u.values); print(u.counts)",
        |t: &mut Tensor| -> RhaiResult<Map> {
            let (values, counts) = guard(|| t.unique_counts())?;
            let mut m = Map::new();
            m.insert("values".into(), Dynamic::from(values));
            m.insert("counts".into(), Dynamic::from(counts));
            Ok(m)
        },
    );
    api.func(
        "bincount",
        "t.bincount() -> Tensor",
        "Counts of each value 0..=max of a 1-D tensor of non-negative integers (i64).",
        "tensor([0, 2, 2, 1, 2]).bincount()",
        |t: &mut Tensor| guard(|| t.bincount(0)),
    );
    api.func(
        "bincount",
        "t.bincount(minlength) -> Tensor",
        "bincount with at least minlength entries (the class count, for classes that never occur).",
        "let y = tensor([0, 2, 2]); y.bincount(4)",
        |t: &mut Tensor, minlength: INT| {
            let minlength = crate::convert::usize_of(minlength, "bincount: minlength")?;
            guard(|| t.bincount(minlength))
        },
    );
    api.func(
        "one_hot",
        "t.one_hot(classes) -> Tensor",
        "Class ids (integers, any shape) as int64 one-hot rows of width classes, on their device, as PyTorch's one_hot; also one_hot(t, classes).",
        "let y = tensor([0, 2, 1]); y.one_hot(3)",
        |t: &mut Tensor, classes: INT| {
            let classes = crate::convert::usize_of(classes, "one_hot: classes")?;
            guard(|| rusting_brain::data::scaling::one_hot(t, classes))
        },
    );
}
