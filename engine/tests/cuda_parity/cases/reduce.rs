//! Reductions over one dim, kept dims, everything, a middle dim and a transposed view (and the
//! scans, cumsum and cumprod, along the same dims); sums also over two leading dims.

use super::{one, SIZES};
use crate::harness::{value, Case, Dist};
use rusting_brain::{Result, Tensor};

const NORMAL: Dist = Dist::Normal;

pub const OPS: &[super::Entry] = &[
    ("sum", || {
        let mut cases = reduce(NORMAL, |x, d, k| x.sum_dims(d, k), |x| x.sum());
        // Sums over leading dims take the column kernels: rows in several chunks of 256, and a
        // last block of columns only partly filled.
        cases.push(Case::new(
            "[700, 3, 45] over dims 0 and 1",
            vec![value(&[700, 3, 45], NORMAL)],
            2100,
            |x| one(x[0].sum_dims(&[0, 1], false)),
        ));
        cases
    }),
    ("mean", || {
        reduce(NORMAL, |x, d, k| x.mean_dims(d, k), |x| x.mean())
    }),
    ("max", || {
        reduce(NORMAL, |x, d, k| x.max_dims(d, k), |x| x.max())
    }),
    ("min", || {
        reduce(NORMAL, |x, d, k| x.min_dims(d, k), |x| x.min())
    }),
    ("argmax", || {
        reduce(
            NORMAL,
            |x, d, k| x.argmax(Some(d[0]), k),
            |x| x.argmax(None, false),
        )
    }),
    ("argmin", || {
        reduce(
            NORMAL,
            |x, d, k| x.argmin(Some(d[0]), k),
            |x| x.argmin(None, false),
        )
    }),
    ("var", || {
        reduce(
            NORMAL,
            |x, d, k| x.var_dims(d, corrected(x, d), k),
            |x| x.var_dims(&[0, 1], true, false),
        )
    }),
    ("std", || {
        reduce(
            NORMAL,
            |x, d, k| x.std_dims(d, corrected(x, d), k),
            |x| x.std_dims(&[0, 1], true, false),
        )
    }),
    ("norm", || {
        reduce(
            NORMAL,
            |x, d, k| x.norm_dims(2.0, d, k),
            |x| x.norm_dims(1.0, &[], false),
        )
    }),
    ("all", || {
        reduce(
            Dist::Ints(0, 2),
            |x, d, k| x.all_dims(d, k),
            |x| x.all_dims(&[], false),
        )
    }),
    ("any", || {
        reduce(
            Dist::Ints(-1, 1),
            |x, d, k| x.any_dims(d, k),
            |x| x.any_dims(&[], false),
        )
    }),
    ("cumsum", || {
        reduce(NORMAL, |x, d, _| x.cumsum(d[0]), |x| x.flatten()?.cumsum(0))
    }),
    ("cumprod", || {
        reduce(
            Dist::Uniform(0.9, 1.1),
            |x, d, _| x.cumprod(d[0]),
            |x| x.flatten()?.cumprod(0),
        )
    }),
    ("logsumexp", || {
        reduce(
            NORMAL,
            |x, d, k| x.logsumexp(d, k),
            |x| x.logsumexp(&[0, 1], false),
        )
    }),
];

/// Whether Bessel's correction applies over `dims`: it needs two values in each.
fn corrected(x: &Tensor, dims: &[isize]) -> bool {
    dims.iter()
        .all(|&i| x.shape()[i.rem_euclid(x.rank() as isize) as usize] > 1)
}

/// Reductions of [rows, cols] over the last dim, the first dim (kept) and everything, of a
/// [2, cols, 3] input over its middle dim, and of a transposed view.
fn reduce(
    dist: Dist,
    dims: impl Fn(&Tensor, &[isize], bool) -> Result<Tensor> + Clone + 'static,
    all: impl Fn(&Tensor) -> Result<Tensor> + Clone + 'static,
) -> Vec<Case> {
    let mut cases = Vec::new();
    for &(r, c) in &SIZES {
        let d = dims.clone();
        cases.push(Case::new(
            format!("[{r}, {c}] over dim -1"),
            vec![value(&[r, c], dist)],
            c,
            move |x| one(d(&x[0], &[-1], false)),
        ));
        let d = dims.clone();
        cases.push(Case::new(
            format!("[{r}, {c}] over dim 0, keepdim"),
            vec![value(&[r, c], dist)],
            r,
            move |x| one(d(&x[0], &[0], true)),
        ));
        let a = all.clone();
        cases.push(Case::new(
            format!("[{r}, {c}] over everything"),
            vec![value(&[r, c], dist)],
            r * c,
            move |x| one(a(&x[0])),
        ));
    }
    let d = dims.clone();
    cases.push(Case::new(
        "[2, 33, 3] over dim 1",
        vec![value(&[2, 33, 3], dist)],
        33,
        move |x| one(d(&x[0], &[1], false)),
    ));
    cases.push(Case::new(
        "[5, 1000] transposed view over dim -1",
        vec![value(&[5, 1000], dist).t()],
        1000,
        move |x| one(dims(&x[0], &[-1], false)),
    ));
    cases
}
