//! Sorting along a dim, as PyTorch defines it: `sort` (values and indices, stable), `argsort`,
//! and the shared ordering that `topk` uses too.
//!
//! The order is found on the host: the keys are read back (from a CUDA tensor this is a copy
//! to the host, and the indices are copied back; there is no sorting kernel yet), and the values
//! are then `gather`ed on the tensor's own device. So they keep their dtype exactly, and
//! gradients reach the input through gather's backward, as `torch.sort`'s do.
//!
//! Ties keep their original order (a stable sort, in both directions). NaN sorts above every
//! number: last ascending, first descending.

use std::cmp::Ordering;

use super::host_keys::HostKeys;
use crate::layout::resolve_dim;
use crate::{bail, Result, Tensor};

impl Tensor {
    /// `(values, indices)` sorted along `dim`, ascending unless `descending`; stable. The
    /// indices are I64 on the tensor's device. A 0-d tensor sorts as one element (dim 0 or -1).
    pub fn sort(&self, dim: isize, descending: bool) -> Result<(Tensor, Tensor)> {
        ordered_along(self, "sort", dim, descending, None)
    }

    /// The indices that sort the tensor along `dim` (the second output of [`Tensor::sort`]).
    pub fn argsort(&self, dim: isize, descending: bool) -> Result<Tensor> {
        ordered_along(self, "argsort", dim, descending, None).map(|(_, indices)| indices)
    }
}

/// The first `take` elements (all when `None`) of every row along `dim` in sorted order, as
/// `(values, indices)` in the input's shape with `dim` of size `take`.
pub(crate) fn ordered_along(
    x: &Tensor,
    op: &'static str,
    dim: isize,
    descending: bool,
    take: Option<usize>,
) -> Result<(Tensor, Tensor)> {
    // As in PyTorch, a 0-d tensor is one element along dim 0 (or -1).
    let scalar = x.rank() == 0;
    let x = if scalar {
        x.reshape_to(&[1])?
    } else {
        x.clone()
    };
    let d = resolve_dim(op, dim, x.rank())?;
    let n = x.shape()[d];
    let k = take.unwrap_or(n);
    if k > n {
        bail!(
            op,
            "k = {k} is larger than the {n} elements along dim {dim} of shape {:?}",
            x.shape()
        );
    }
    // Rows along the last dim: `dim` swapped with it.
    let moved = x.detach().transpose(d as isize, -1)?;
    let keys = HostKeys::read(&moved)?;
    let rows = keys.len().checked_div(n).unwrap_or(0);
    let mut indices = Vec::with_capacity(rows * k);
    for r in 0..rows {
        indices.extend(
            row_order(&keys, r * n, n, k, descending)
                .into_iter()
                .map(|i| i as i64),
        );
    }
    let mut moved_shape = moved.shape().to_vec();
    if let Some(last) = moved_shape.last_mut() {
        *last = k;
    }
    let indices = Tensor::from_vec(indices, &moved_shape)?
        .transpose(d as isize, -1)?
        .contiguous()?
        .to_device(x.device())?;
    let values = x.gather(d as isize, &indices)?;
    if scalar {
        Ok((values.reshape_to(&[])?, indices.reshape_to(&[])?))
    } else {
        Ok((values, indices))
    }
}

/// The positions (within the row) of the first `k` of the `n` elements that start at `start`,
/// in order. Ties break by position, which makes the order total: an unstable sort and a
/// partial selection then give what a stable full sort gives.
fn row_order(keys: &HostKeys, start: usize, n: usize, k: usize, descending: bool) -> Vec<usize> {
    let cmp = |a: &usize, b: &usize| -> Ordering {
        let by_value = keys.cmp(start + a, start + b);
        let by_value = if descending {
            by_value.reverse()
        } else {
            by_value
        };
        by_value.then(a.cmp(b))
    };
    let mut order: Vec<usize> = (0..n).collect();
    if k < n {
        // Only the first k need sorting: select them in linear time first.
        if k > 0 {
            order.select_nth_unstable_by(k - 1, cmp);
        }
        order.truncate(k);
    }
    order.sort_unstable_by(cmp);
    order
}

#[cfg(test)]
#[path = "sort_tests.rs"]
mod tests;
