//! Reductions (ReduceMean, ReduceSum, ...; their axes an attribute or, from opset 13 for
//! ReduceSum and 18 for the rest, an input) and ArgMax/ArgMin.

use super::{one, OpFn};
use crate::graph::node::Node;
use crate::{DType, Result, Tensor};

const INF: f64 = f64::INFINITY;

// Each with the value of a reduction over no elements.
pub const OPS: &[(&str, OpFn)] = &[
    ("ReduceMean", |n| {
        reduce(n, 18, f64::NAN, |x, d, k| x.mean_dims(d, k))
    }),
    ("ReduceSum", |n| {
        reduce(n, 13, 0.0, |x, d, k| x.sum_dims(d, k))
    }),
    ("ReduceMax", |n| {
        reduce(n, 18, -INF, |x, d, k| x.max_dims(d, k))
    }),
    ("ReduceMin", |n| {
        reduce(n, 18, INF, |x, d, k| x.min_dims(d, k))
    }),
    ("ReduceProd", |n| reduce(n, 18, 1.0, product)),
    ("ReduceSumSquare", |n| {
        reduce(n, 18, 0.0, |x, d, k| x.mul(x)?.sum_dims(d, k))
    }),
    ("ReduceL1", |n| {
        reduce(n, 18, 0.0, |x, d, k| x.abs()?.sum_dims(d, k))
    }),
    ("ReduceL2", |n| {
        reduce(n, 18, 0.0, |x, d, k| x.mul(x)?.sum_dims(d, k)?.sqrt())
    }),
    ("ReduceLogSum", |n| {
        reduce(n, 18, -INF, |x, d, k| x.sum_dims(d, k)?.log())
    }),
    ("ReduceLogSumExp", |n| {
        reduce(n, 18, -INF, |x, d, k| x.logsumexp(d, k))
    }),
    ("ArgMax", |n| arg(n, true)),
    ("ArgMin", |n| arg(n, false)),
];

type Reduction = fn(&Tensor, &[isize], bool) -> Result<Tensor>;

/// `axes_input_from`: the opset from which the axes are the second input; `empty`: the result
/// where a reduced dim has no elements.
fn reduce(n: &Node, axes_input_from: i64, empty: f64, f: Reduction) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let keep = n.int("keepdims", 1)? != 0;
    let axes = if n.opset >= axes_input_from {
        n.opt_host_ints(1)?
    } else {
        n.ints("axes")?
    };
    let axes = axes.unwrap_or_default();
    if axes.is_empty() && n.int("noop_with_empty_axes", 0)? != 0 {
        return one(x.clone());
    }
    let dims: Vec<isize> = if axes.is_empty() {
        (0..x.rank() as isize).collect()
    } else {
        axes.iter()
            .map(|&a| n.axis(a, x.rank()).map(|a| a as isize))
            .collect::<Result<_>>()?
    };
    if x.rank() == 0 {
        return one(x.clone());
    }
    if dims.iter().any(|&d| x.shape()[d as usize] == 0) {
        let shape: Vec<usize> = (0..x.rank())
            .filter_map(|d| match (dims.contains(&(d as isize)), keep) {
                (false, _) => Some(x.shape()[d]),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect();
        return one(Tensor::full(empty, &shape, x.dtype(), x.device())?);
    }
    one(f(x, &dims, keep)?)
}

/// The product over `dims`: the last of a running product along each.
fn product(x: &Tensor, dims: &[isize], keep: bool) -> Result<Tensor> {
    let mut sorted = dims.to_vec();
    sorted.sort_unstable();
    let mut y = x.clone();
    for &d in sorted.iter().rev() {
        let len = y.shape()[d as usize];
        y = y.cumprod(d)?.narrow(d, len - 1, 1)?;
        if !keep {
            y = y.squeeze(d)?;
        }
    }
    Ok(y)
}

fn arg(n: &Node, largest: bool) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    n.require(n.int("select_last_index", 0)? == 0, "select_last_index = 1")?;
    let axis = n.axis(n.int("axis", 0)?, x.rank())? as isize;
    let keep = n.int("keepdims", 1)? != 0;
    let y = if largest {
        x.argmax(Some(axis), keep)?
    } else {
        x.argmin(Some(axis), keep)?
    };
    one(y.to_dtype(DType::I64)?)
}
