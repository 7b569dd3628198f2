//! Unary elementwise ops, and swiglu.

use super::{one, SIZES};
use crate::harness::{normal, value, Case, Dist};
use rusting_brain::{Result, Tensor};

const NORMAL: Dist = Dist::Normal;
/// For logs and roots.
const POSITIVE: Dist = Dist::Uniform(0.25, 4.0);

pub const OPS: &[super::Entry] = &[
    ("neg", || unary(NORMAL, |x| x.neg())),
    ("abs", || unary(NORMAL, |x| x.abs())),
    ("exp", || unary(Dist::Uniform(-2.0, 2.0), |x| x.exp())),
    ("log", || unary(POSITIVE, |x| x.log())),
    ("sqrt", || unary(POSITIVE, |x| x.sqrt())),
    ("rsqrt", || unary(POSITIVE, |x| x.rsqrt())),
    ("sin", || unary(NORMAL, |x| x.sin())),
    ("cos", || unary(NORMAL, |x| x.cos())),
    ("atan", || unary(Dist::Uniform(-6.0, 6.0), |x| x.atan())),
    ("tanh", || unary(NORMAL, |x| x.tanh())),
    ("sigmoid", || unary(NORMAL, |x| x.sigmoid())),
    ("relu", || unary(NORMAL, |x| x.relu())),
    ("gelu", || unary(NORMAL, |x| x.gelu())),
    ("gelu_tanh", || unary(NORMAL, |x| x.gelu_tanh())),
    ("quick_gelu", || unary(NORMAL, |x| x.quick_gelu())),
    ("silu", || unary(NORMAL, |x| x.silu())),
    // Past softplus's threshold of 20 too, where it returns x.
    ("softplus", || {
        unary(Dist::Uniform(-30.0, 30.0), |x| x.softplus())
    }),
    ("mish", || unary(Dist::Uniform(-8.0, 8.0), |x| x.mish())),
    ("leaky_relu", || unary(NORMAL, |x| x.leaky_relu(0.2))),
    ("elu", || unary(Dist::Uniform(-6.0, 6.0), |x| x.elu(0.8))),
    ("selu", || unary(Dist::Uniform(-6.0, 6.0), |x| x.selu())),
    ("celu", || unary(Dist::Uniform(-6.0, 6.0), |x| x.celu(1.5))),
    ("hardtanh", || unary(NORMAL, |x| x.hardtanh(-0.5, 0.75))),
    ("relu6", || unary(Dist::Uniform(-3.0, 9.0), |x| x.relu6())),
    ("hardsigmoid", || {
        unary(Dist::Uniform(-5.0, 5.0), |x| x.hardsigmoid())
    }),
    ("hardswish", || {
        unary(Dist::Uniform(-5.0, 5.0), |x| x.hardswish())
    }),
    ("softsign", || {
        unary(Dist::Uniform(-6.0, 6.0), |x| x.softsign())
    }),
    ("log_sigmoid", || {
        unary(Dist::Uniform(-30.0, 30.0), |x| x.log_sigmoid())
    }),
    ("swiglu", swiglu_cases),
    ("sign", || unary(NORMAL, |x| x.sign())),
    ("erf", || unary(NORMAL, |x| x.erf())),
    ("floor", || unary(Dist::Uniform(-5.0, 5.0), |x| x.floor())),
    ("ceil", || unary(Dist::Uniform(-5.0, 5.0), |x| x.ceil())),
    ("round", || unary(Dist::Uniform(-5.0, 5.0), |x| x.round())),
    ("pow", || {
        unary(Dist::Uniform(0.5, 2.0), |x| x.pow_scalar(2.5))
    }),
    ("clamp", || {
        unary(NORMAL, |x| {
            if x.dtype().is_float() {
                x.clamp(-0.5, 0.75)
            } else {
                x.clamp(-2.0, 5.0)
            }
        })
    }),
    ("affine", || unary(NORMAL, |x| x.affine(-2.0, 1.0))),
];

/// One case per size on a [rows, cols] input, plus a transposed (non-contiguous) input.
fn unary(dist: Dist, f: impl Fn(&Tensor) -> Result<Tensor> + Clone + 'static) -> Vec<Case> {
    let mut cases: Vec<Case> = SIZES
        .iter()
        .map(|&(r, c)| {
            let f = f.clone();
            Case::new(
                format!("[{r}, {c}]"),
                vec![value(&[r, c], dist)],
                1,
                move |x| one(f(&x[0])),
            )
        })
        .collect();
    cases.push(Case::new(
        "[5, 33] transposed view",
        vec![value(&[5, 33], dist).t()],
        1,
        move |x| one(f(&x[0])),
    ));
    cases
}

/// swiglu over the vector path and its scalar tail (4097 columns), and transposed operands.
fn swiglu_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = SIZES
        .iter()
        .map(|&(r, c)| {
            Case::new(
                format!("[{r}, {c}]"),
                vec![normal(&[r, c]), normal(&[r, c])],
                1,
                |x| one(x[0].swiglu(&x[1])),
            )
        })
        .collect();
    cases.push(Case::new(
        "[5, 33] transposed views",
        vec![normal(&[33, 5]).t(), normal(&[33, 5]).t()],
        1,
        |x| one(x[0].swiglu(&x[1])),
    ));
    cases
}
