//! Binary elementwise ops with broadcasting, against tensors and host scalars.

use super::{one, SIZES};
use crate::harness::{normal, value, Case, Dist};
use rusting_brain::{Result, Tensor};

const NORMAL: Dist = Dist::Normal;

pub const OPS: &[super::Entry] = &[
    ("add", || {
        binary(NORMAL, |a, b| a.add(b), |a, v| a.add_scalar(v))
    }),
    ("sub", || {
        binary(NORMAL, |a, b| a.sub(b), |a, v| a.sub_scalar(v))
    }),
    ("mul", || {
        binary(NORMAL, |a, b| a.mul(b), |a, v| a.mul_scalar(v))
    }),
    ("div", || {
        binary(
            Dist::Uniform(0.5, 2.0),
            |a, b| a.div(b),
            |a, v| a.div_scalar(v),
        )
    }),
    ("maximum", || {
        binary(
            NORMAL,
            |a, b| a.maximum(b),
            |a, v| a.maximum(&a.scalar_like(v)?),
        )
    }),
    ("minimum", || {
        binary(
            NORMAL,
            |a, b| a.minimum(b),
            |a, v| a.minimum(&a.scalar_like(v)?),
        )
    }),
];

/// Same-shape, row-broadcast, outer-broadcast, transposed, 0-d device scalar and host scalar
/// operands.
fn binary(
    rhs: Dist,
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor> + Clone + 'static,
    scalar: impl Fn(&Tensor, f64) -> Result<Tensor> + Clone + 'static,
) -> Vec<Case> {
    let mut cases = Vec::new();
    for &(r, c) in &SIZES {
        let g = f.clone();
        cases.push(Case::new(
            format!("[{r}, {c}] with [{r}, {c}]"),
            vec![normal(&[r, c]), value(&[r, c], rhs)],
            1,
            move |x| one(g(&x[0], &x[1])),
        ));
        let g = f.clone();
        cases.push(Case::new(
            format!("[{r}, {c}] with [{c}]"),
            vec![normal(&[r, c]), value(&[c], rhs)],
            1,
            move |x| one(g(&x[0], &x[1])),
        ));
        let g = f.clone();
        cases.push(Case::new(
            format!("[{r}, 1] with [1, {c}]"),
            vec![normal(&[r, 1]), value(&[1, c], rhs)],
            1,
            move |x| one(g(&x[0], &x[1])),
        ));
    }
    let g = f.clone();
    cases.push(Case::new(
        "[5, 33] transposed view with [5, 33]",
        vec![normal(&[5, 33]).t(), value(&[5, 33], rhs)],
        1,
        move |x| one(g(&x[0], &x[1])),
    ));
    let g = f.clone();
    cases.push(Case::new(
        "[3, 1000] with a 0-d tensor on the same device",
        vec![normal(&[3, 1000]), value(&[], rhs)],
        1,
        move |x| one(g(&x[0], &x[1])),
    ));
    cases.push(Case::new(
        "[3, 1000] with a host scalar (the *_scalar methods)",
        vec![normal(&[3, 1000])],
        1,
        move |x| one(scalar(&x[0], 2.0)),
    ));
    cases
}
