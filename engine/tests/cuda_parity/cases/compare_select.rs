//! Comparisons (on ties, so equality is exercised), where and masked_fill.

use super::{mask, one, SIZES};
use crate::harness::{fixed, normal, value, Case, Dist};
use rusting_brain::{Result, Tensor};

pub const OPS: &[super::Entry] = &[
    ("eq", || compare(|a, b| a.eq(b))),
    ("ne", || compare(|a, b| a.ne(b))),
    ("lt", || compare(|a, b| a.lt(b))),
    ("le", || compare(|a, b| a.le(b))),
    ("gt", || compare(|a, b| a.gt(b))),
    ("ge", || compare(|a, b| a.ge(b))),
    ("where", where_cases),
    ("masked_fill", masked_fill_cases),
];

fn compare(f: impl Fn(&Tensor, &Tensor) -> Result<Tensor> + Clone + 'static) -> Vec<Case> {
    let ties = Dist::Ints(-3, 3);
    let mut cases = Vec::new();
    for &(r, c) in &SIZES {
        let g = f.clone();
        cases.push(Case::new(
            format!("[{r}, {c}] with [{r}, {c}]"),
            vec![value(&[r, c], ties), value(&[r, c], ties)],
            1,
            move |x| one(g(&x[0], &x[1])),
        ));
        let g = f.clone();
        cases.push(Case::new(
            format!("[{r}, {c}] with [{c}]"),
            vec![value(&[r, c], ties), value(&[c], ties)],
            1,
            move |x| one(g(&x[0], &x[1])),
        ));
    }
    cases.push(Case::new(
        "[5, 33] transposed view with [5, 33]",
        vec![value(&[5, 33], ties).t(), value(&[5, 33], ties)],
        1,
        move |x| one(f(&x[0], &x[1])),
    ));
    cases
}

fn where_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, &(r, c)) in SIZES.iter().enumerate() {
        cases.push(Case::new(
            format!("[{r}, {c}] condition, [{r}, {c}] and [{c}] values"),
            vec![
                fixed(mask(&[r, c], 200 + i as u64)),
                normal(&[r, c]),
                normal(&[c]),
            ],
            1,
            |x| one(Tensor::where_cond(&x[0], &x[1], &x[2])),
        ));
        cases.push(Case::new(
            format!("[{r}, 1] condition, [{r}, {c}] values"),
            vec![
                fixed(mask(&[r, 1], 300 + i as u64)),
                normal(&[r, c]),
                normal(&[r, c]),
            ],
            1,
            |x| one(Tensor::where_cond(&x[0], &x[1], &x[2])),
        ));
    }
    cases
}

fn masked_fill_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, &(r, c)) in SIZES.iter().enumerate() {
        cases.push(Case::new(
            format!("[{r}, {c}] with a [{r}, {c}] mask, 2"),
            vec![normal(&[r, c]), fixed(mask(&[r, c], 400 + i as u64))],
            1,
            |x| one(x[0].masked_fill(&x[1], 2.0)),
        ));
        cases.push(Case::new(
            format!("[{r}, {c}] with a [{c}] mask, -inf for floats (an attention mask)"),
            vec![normal(&[r, c]), fixed(mask(&[c], 500 + i as u64))],
            1,
            |x| {
                let v = if x[0].dtype().is_float() {
                    f64::NEG_INFINITY
                } else {
                    0.0
                };
                one(x[0].masked_fill(&x[1], v))
            },
        ));
    }
    cases
}
