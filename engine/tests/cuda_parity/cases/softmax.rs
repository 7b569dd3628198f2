//! softmax and log_softmax over the last dim, the first dim, a middle dim, short rows, wide
//! logits and a transposed view.

use super::{one, SIZES};
use crate::harness::{normal, value, Case, Dist};
use rusting_brain::{Result, Tensor};

pub const OPS: &[super::Entry] = &[
    ("softmax", || softmax(|x, d| x.softmax(d))),
    ("log_softmax", || softmax(|x, d| x.log_softmax(d))),
];

fn softmax(f: impl Fn(&Tensor, isize) -> Result<Tensor> + Clone + 'static) -> Vec<Case> {
    let mut cases = Vec::new();
    for &(r, c) in &SIZES {
        let g = f.clone();
        cases.push(Case::new(
            format!("[{r}, {c}] over dim -1"),
            vec![normal(&[r, c])],
            c,
            move |x| one(g(&x[0], -1)),
        ));
        let g = f.clone();
        cases.push(Case::new(
            format!("[{r}, {c}] over dim 0"),
            vec![normal(&[r, c])],
            r,
            move |x| one(g(&x[0], 0)),
        ));
    }
    // The short-row kernels: a DFL's rows of 16 (two rows a warp, an odd count of rows) and
    // rows of 32 and 2 (a warp per row, sixteen rows a warp).
    for shape in [[2001, 16], [65, 32], [300, 2]] {
        let g = f.clone();
        cases.push(Case::new(
            format!("{shape:?} over dim -1 (short rows)"),
            vec![normal(&shape)],
            shape[1],
            move |x| one(g(&x[0], -1)),
        ));
    }
    let g = f.clone();
    cases.push(Case::new(
        "[2, 33, 3] over dim 1",
        vec![normal(&[2, 33, 3])],
        33,
        move |x| one(g(&x[0], 1)),
    ));
    let g = f.clone();
    cases.push(Case::new(
        "[4, 1000] of values in [-20, 20] over dim -1",
        vec![value(&[4, 1000], Dist::Uniform(-20.0, 20.0))],
        1000,
        move |x| one(g(&x[0], -1)),
    ));
    cases.push(Case::new(
        "[5, 1000] transposed view over dim -1",
        vec![normal(&[5, 1000]).t()],
        1000,
        move |x| one(f(&x[0], -1)),
    ));
    cases
}
