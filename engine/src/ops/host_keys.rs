//! A tensor's values read to the host as keys that compare exactly, for the ops that order or
//! count values there (`sort`, `topk`, `unique`): floats as f64, which holds every float dtype
//! exactly, and integers and bools as i64, which holds every integer dtype exactly (an f64 would
//! not, above 2^53).

use std::cmp::Ordering;

use crate::{Result, Tensor};

pub(crate) enum HostKeys {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

impl HostKeys {
    /// The elements of `t` in row-major order of its (possibly strided) layout, copied from
    /// whatever device it is on.
    pub(crate) fn read(t: &Tensor) -> Result<HostKeys> {
        if t.dtype().is_float() {
            t.to_vec_f64().map(HostKeys::Float)
        } else {
            t.to_vec::<i64>().map(HostKeys::Int)
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            HostKeys::Float(v) => v.len(),
            HostKeys::Int(v) => v.len(),
        }
    }

    /// Ascending order of elements `i` and `j`. NaN is above every number and equal to
    /// another NaN, which puts NaNs last in an ascending sort and first in a descending one,
    /// as PyTorch does.
    pub(crate) fn cmp(&self, i: usize, j: usize) -> Ordering {
        match self {
            HostKeys::Int(v) => v[i].cmp(&v[j]),
            HostKeys::Float(v) => {
                let (a, b) = (v[i], v[j]);
                match (a.is_nan(), b.is_nan()) {
                    (true, true) => Ordering::Equal,
                    (true, false) => Ordering::Greater,
                    (false, true) => Ordering::Less,
                    // Neither is NaN, so they are ordered (and -0.0 equals 0.0).
                    (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
                }
            }
        }
    }

    /// Whether elements `i` and `j` are the same value for `unique`: NaN equals nothing, not
    /// even another NaN, so each NaN stays its own value, as in `torch.unique`.
    pub(crate) fn same(&self, i: usize, j: usize) -> bool {
        match self {
            HostKeys::Int(v) => v[i] == v[j],
            HostKeys::Float(v) => v[i] == v[j],
        }
    }
}
