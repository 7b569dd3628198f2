//! Joining tensors (cat, stack) and cutting one into pieces (split, chunk).

use super::to_array;
use crate::convert;
use crate::error::guard;
use crate::help::Api;
use rhai::{Array, INT};
use rusting_brain::Tensor;

pub fn register(api: &mut Api) {
    api.func(
        "cat",
        "cat(tensors, dim) -> Tensor",
        "Concatenates along dim.",
        "let a = ones([2, 3]); let b = zeros([1, 3]); cat([a, b], 0)",
        |ts: Array, d: INT| {
            let ts = convert::tensors(&ts, "cat", "element")?;
            guard(|| Tensor::cat(&ts, d as isize))
        },
    );
    api.func(
        "stack",
        "stack(tensors, dim) -> Tensor",
        "Stacks equal-shaped tensors along a new dim.",
        "let a = ones([2, 3]); let b = zeros([2, 3]); stack([a, b], 0)",
        |ts: Array, d: INT| {
            let ts = convert::tensors(&ts, "stack", "element")?;
            guard(|| Tensor::stack(&ts, d as isize))
        },
    );
    api.func(
        "split",
        "t.split(size, dim) -> array",
        "Pieces of size along dim (the last may be smaller).",
        "let x = randn([5, 3]); let parts = x.split(2, 0);",
        |t: &mut Tensor, s: INT, d: INT| {
            let s = convert::usize_of(s, "split")?;
            guard(|| t.split(s, d as isize)).map(to_array)
        },
    );
    api.func(
        "chunk",
        "t.chunk(n, dim) -> array",
        "n nearly equal pieces along dim.",
        "let x = randn([2, 6]); let halves = x.chunk(2, -1);",
        |t: &mut Tensor, n: INT, d: INT| {
            let n = convert::usize_of(n, "chunk")?;
            guard(|| t.chunk(n, d as isize)).map(to_array)
        },
    );
}
