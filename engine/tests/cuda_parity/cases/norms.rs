//! layer_norm and rms_norm.

use super::{one, SIZES};
use crate::harness::{normal, value, Case, Dist};
use rusting_brain::{Result, Tensor};

pub const OPS: &[super::Entry] = &[
    ("layer_norm", || norm_cases(true)),
    ("rms_norm", || norm_cases(false)),
];

/// layer_norm (with a bias) or rms_norm over the last dim, with and without a weight, of a
/// transposed view, and layer_norm over two trailing dims.
fn norm_cases(layer: bool) -> Vec<Case> {
    fn apply(layer: bool, x: &Tensor, w: Option<&Tensor>, b: Option<&Tensor>) -> Result<Tensor> {
        if layer {
            x.layer_norm(w, b, 1e-5)
        } else {
            x.rms_norm(w, 1e-6)
        }
    }
    let mut cases = Vec::new();
    // A single column normalizes to exactly 0 (layer_norm) or +-1 (rms_norm): the input
    // gradient is rounding noise amplified by rstd = 1/sqrt(eps), so it is left out.
    for &(r, c) in SIZES.iter().filter(|&&(_, c)| c > 1) {
        let mut inputs = vec![normal(&[r, c]), value(&[c], Dist::Uniform(0.5, 1.5))];
        if layer {
            inputs.push(normal(&[c]));
        }
        cases.push(Case::new(
            format!(
                "[{r}, {c}] with weight{}",
                if layer { " and bias" } else { "" }
            ),
            inputs,
            c,
            move |x| one(apply(layer, &x[0], Some(&x[1]), x.get(2))),
        ));
        cases.push(Case::new(
            format!("[{r}, {c}] without parameters"),
            vec![normal(&[r, c])],
            c,
            move |x| one(apply(layer, &x[0], None, None)),
        ));
    }
    cases.push(Case::new(
        "[2, 3, 33] with weight",
        vec![normal(&[2, 3, 33]), value(&[33], Dist::Uniform(0.5, 1.5))],
        33,
        move |x| one(apply(layer, &x[0], Some(&x[1]), None)),
    ));
    cases.push(Case::new(
        "[5, 1000] transposed view with weight",
        vec![
            normal(&[5, 1000]).t(),
            value(&[1000], Dist::Uniform(0.5, 1.5)),
        ],
        1000,
        move |x| one(apply(layer, &x[0], Some(&x[1]), None)),
    ));
    cases.push(Case::new(
        "[2, 3, 33] over the last two dims, weight [3, 33]",
        vec![
            normal(&[2, 3, 33]),
            value(&[3, 33], Dist::Uniform(0.5, 1.5)),
        ],
        99,
        move |x| one(apply(layer, &x[0], Some(&x[1]), None)),
    ));
    cases
}
