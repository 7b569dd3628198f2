//! Shapes and views: reshape, permute, transpose, narrow, slice, squeeze, expand, flatten.

use crate::convert::{self, dims, shape};
use crate::error::guard;
use crate::help::Api;
use rhai::{Array, INT};
use rusting_brain::Tensor;

pub fn register(api: &mut Api) {
    unary_methods! { api;
        "contiguous" => contiguous, "The same values in a contiguous layout (copies only when needed).";
        "flatten" => flatten, "The tensor as 1-D.";
        "t" => t, "Transpose of the last two dims (a view).";
    }
    api.func(
        "reshape",
        "t.reshape(shape) -> Tensor",
        "Same values in a new shape; one dim may be -1.",
        "let x = randn([2, 3, 4]); x.reshape([2, -1])",
        |t: &mut Tensor, s: Array| {
            let s = dims(&s, "reshape")?;
            guard(|| t.reshape(&s))
        },
    );
    api.func(
        "view",
        "t.view(shape) -> Tensor",
        "Alias of reshape.",
        "let x = randn([2, 3]); x.view([-1])",
        |t: &mut Tensor, s: Array| {
            let s = dims(&s, "view")?;
            guard(|| t.reshape(&s))
        },
    );
    api.func(
        "permute",
        "t.permute(dims) -> Tensor",
        "Reorders dims (a view).",
        "let x = randn([2, 3, 4]); x.permute([0, 2, 1])",
        |t: &mut Tensor, d: Array| {
            let d = dims(&d, "permute")?;
            guard(|| t.permute(&d))
        },
    );
    api.func(
        "transpose",
        "t.transpose(dim0, dim1) -> Tensor",
        "Swaps two dims (a view).",
        "let x = randn([2, 3]); x.transpose(0, 1)",
        |t: &mut Tensor, a: INT, b: INT| guard(|| t.transpose(a as isize, b as isize)),
    );
    api.func(
        "narrow",
        "t.narrow(dim, start, length) -> Tensor",
        "length entries from start along dim (a view).",
        "let x = randn([2, 3]); x.narrow(1, 0, 2)",
        |t: &mut Tensor, d: INT, s: INT, n: INT| {
            let (s, n) = (
                convert::usize_of(s, "narrow")?,
                convert::usize_of(n, "narrow")?,
            );
            guard(|| t.narrow(d as isize, s, n))
        },
    );
    api.func(
        "slice",
        "t.slice(dim, start, end) -> Tensor",
        "Python-style slice start..end along dim (negatives count from the end).",
        "let x = randn([2, 4]); x.slice(1, 1, -1)",
        |t: &mut Tensor, d: INT, s: INT, e: INT| {
            guard(|| t.slice(d as isize, s as isize, e as isize))
        },
    );
    api.func(
        "squeeze",
        "t.squeeze(dim) -> Tensor",
        "Drops dim if it has size 1.",
        "let x = randn([1, 3]); x.squeeze(0)",
        |t: &mut Tensor, d: INT| guard(|| t.squeeze(d as isize)),
    );
    api.func(
        "unsqueeze",
        "t.unsqueeze(dim) -> Tensor",
        "Inserts a size-1 dim.",
        "let x = randn([3]); x.unsqueeze(0)",
        |t: &mut Tensor, d: INT| guard(|| t.unsqueeze(d as isize)),
    );
    api.func(
        "expand",
        "t.expand(shape) -> Tensor",
        "Broadcasts to shape without copying.",
        "let b = randn([1, 3]); b.expand([4, 3])",
        |t: &mut Tensor, s: Array| {
            let s = shape(&s, "expand")?;
            guard(|| t.expand(&s))
        },
    );
}
