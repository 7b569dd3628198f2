//! Sorting along a dim: sort, argsort and topk. `sort` and `topk` return a map
//! `#{ values, indices }`, as PyTorch's named tuple has `.values` and `.indices`.

use crate::error::{guard, RhaiResult};
use crate::help::Api;
use rhai::{Dynamic, Map, INT};
use rusting_brain::Tensor;

/// `#{ values, indices }` of an engine (values, indices) pair.
fn values_indices(pair: RhaiResult<(Tensor, Tensor)>) -> RhaiResult<Map> {
    let (values, indices) = pair?;
    let mut m = Map::new();
    m.insert("values".into(), Dynamic::from(values));
    m.insert("indices".into(), Dynamic::from(indices));
    Ok(m)
}

fn k_of(k: INT) -> RhaiResult<usize> {
    crate::convert::usize_of(k, "topk: k")
}

pub fn register(api: &mut Api) {
    register_sort(api);
    register_topk(api);
}

fn register_sort(api: &mut Api) {
    api.func(
        "sort",
        "t.sort() -> #{ values, indices }",
        "Sorts along the last dim, ascending; stable (ties keep their order), NaN last.",
        "let s = tensor([3.0, 1.0, 2.0]).sort(); print(s.values); print(s.indices)",
        |t: &mut Tensor| values_indices(guard(|| t.sort(-1, false))),
    );
    api.func(
        "sort",
        "t.sort(dim) -> #{ values, indices }",
        "Sorts along dim, ascending; stable.",
        "let x = tensor([[3, 1], [0, 2]]); x.sort(0).values",
        |t: &mut Tensor, d: INT| values_indices(guard(|| t.sort(d as isize, false))),
    );
    api.func(
        "sort",
        "t.sort(dim, descending) -> #{ values, indices }",
        "Sorts along dim, largest first when descending; stable in both directions.",
        "let scores = tensor([0.1, 0.7, 0.2]); scores.sort(-1, true).indices",
        |t: &mut Tensor, d: INT, desc: bool| values_indices(guard(|| t.sort(d as isize, desc))),
    );
    api.func(
        "argsort",
        "t.argsort() -> Tensor",
        "The indices that sort the last dim ascending (i64).",
        "tensor([3.0, 1.0, 2.0]).argsort()",
        |t: &mut Tensor| guard(|| t.argsort(-1, false)),
    );
    api.func(
        "argsort",
        "t.argsort(dim) -> Tensor",
        "The indices that sort along dim ascending.",
        "let x = randn([3, 4]); x.argsort(0)",
        |t: &mut Tensor, d: INT| guard(|| t.argsort(d as isize, false)),
    );
    api.func(
        "argsort",
        "t.argsort(dim, descending) -> Tensor",
        "The indices that sort along dim, largest first when descending.",
        "let x = randn([3, 4]); x.argsort(-1, true)",
        |t: &mut Tensor, d: INT, desc: bool| guard(|| t.argsort(d as isize, desc)),
    );
}

fn register_topk(api: &mut Api) {
    api.func(
        "topk",
        "t.topk(k) -> #{ values, indices }",
        "The k largest along the last dim, largest first (ties: earlier index first).",
        "let logits = randn([2, 10]); let top = logits.topk(3); print(top.indices)",
        |t: &mut Tensor, k: INT| {
            let k = k_of(k)?;
            values_indices(guard(|| t.topk(k, -1, true)))
        },
    );
    api.func(
        "topk",
        "t.topk(k, dim) -> #{ values, indices }",
        "The k largest along dim.",
        "let x = randn([5, 3]); x.topk(2, 0).values",
        |t: &mut Tensor, k: INT, d: INT| {
            let k = k_of(k)?;
            values_indices(guard(|| t.topk(k, d as isize, true)))
        },
    );
    api.func(
        "topk",
        "t.topk(k, dim, largest) -> #{ values, indices }",
        "The k largest along dim, or the k smallest (smallest first) when largest is false.",
        "let x = tensor([4.0, 1.0, 3.0, 2.0]); x.topk(2, -1, false).values",
        |t: &mut Tensor, k: INT, d: INT, largest: bool| {
            let k = k_of(k)?;
            values_indices(guard(|| t.topk(k, d as isize, largest)))
        },
    );
}
