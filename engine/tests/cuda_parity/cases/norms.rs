//! layer_norm, rms_norm, batch_norm and group_norm.

use super::{one, SIZES};
use crate::harness::{normal, value, Case, Dist};
use rusting_brain::{Result, Tensor};

pub const OPS: &[super::Entry] = &[
    ("layer_norm", || norm_cases(true)),
    ("rms_norm", || norm_cases(false)),
    ("batch_norm", batch_norm_cases),
    ("group_norm", group_norm_cases),
];

/// group_norm of [N, C, H, W] in 2 and 4 groups with a weight and bias, and of [N, C, L]
/// without them.
fn group_norm_cases() -> Vec<Case> {
    let affine = |c: usize| {
        vec![
            normal(&[2, c, 5, 7]),
            value(&[c], Dist::Uniform(0.5, 1.5)),
            normal(&[c]),
        ]
    };
    vec![
        Case::new("[2, 8, 5, 7] in 2 groups", affine(8), 4 * 35, |x| {
            one(x[0].group_norm(2, Some(&x[1]), Some(&x[2]), 1e-5))
        }),
        Case::new("[2, 8, 5, 7] in 4 groups", affine(8), 2 * 35, |x| {
            one(x[0].group_norm(4, Some(&x[1]), Some(&x[2]), 1e-5))
        }),
        Case::new(
            "[3, 6, 33] in 3 groups, no affine",
            vec![normal(&[3, 6, 33])],
            2 * 33,
            |x| one(x[0].group_norm(3, None, None, 1e-5)),
        ),
    ]
}

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
    // More row chunks than the column sums take at once: the weight's gradient is summed in
    // splits, then the splits.
    cases.push(
        Case::new(
            "[3000, 64] with weight",
            vec![normal(&[3000, 64]), value(&[64], Dist::Uniform(0.5, 1.5))],
            64,
            move |x| one(apply(layer, &x[0], Some(&x[1]), None)),
        )
        .grad_k(3000),
    );
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

/// batch_norm in training (the batch's statistics; fresh running statistics each call) with and
/// without the affine parameters, over NCHW planes whose size takes the 16-byte kernels (8x8)
/// and the one-element ones (3x5), over [N, C], and in eval with fixed running statistics.
fn batch_norm_cases() -> Vec<Case> {
    fn train(x: &[Tensor], affine: bool) -> Result<Vec<Tensor>> {
        train_with(x, affine, Tensor::batch_norm)
    }
    type Norm = fn(
        &Tensor,
        Option<(&Tensor, &Tensor)>,
        Option<&Tensor>,
        Option<&Tensor>,
        bool,
        f64,
        f64,
    ) -> Result<Tensor>;
    fn batch_norm_relu(
        x: &Tensor,
        running: Option<(&Tensor, &Tensor)>,
        w: Option<&Tensor>,
        b: Option<&Tensor>,
        training: bool,
        momentum: f64,
        eps: f64,
    ) -> Result<Tensor> {
        let relu = rusting_brain::backend::spec::NormAct::Relu;
        x.batch_norm_act(running, w, b, training, momentum, eps, relu)
    }
    fn train_with(x: &[Tensor], affine: bool, norm: Norm) -> Result<Vec<Tensor>> {
        let c = x[0].shape()[1];
        let (dt, dev) = (rusting_brain::DType::F32, x[0].device());
        let rm = Tensor::zeros(&[c], dt, dev)?;
        let rv = Tensor::ones(&[c], dt, dev)?;
        let (w, b) = if affine {
            (x.get(1), x.get(2))
        } else {
            (None, None)
        };
        let y = norm(&x[0], Some((&rm, &rv)), w, b, true, 0.1, 1e-5)?;
        // The running statistics are outputs too (compared, not differentiated).
        Ok(vec![y, rm, rv])
    }
    let mut cases = Vec::new();
    for shape in [[4usize, 3, 8, 8], [2, 5, 3, 5], [6, 4, 1, 1]] {
        let (c, count) = (shape[1], shape[0] * shape[2] * shape[3]);
        let fused: [(&str, Norm); 3] = [
            ("", Tensor::batch_norm),
            (" and SiLU fused", Tensor::batch_norm_silu),
            (" and ReLU fused", batch_norm_relu),
        ];
        for (label, norm) in fused {
            cases.push(Case::new(
                format!("{shape:?} training with weight and bias{label}"),
                vec![
                    normal(&shape),
                    value(&[c], Dist::Uniform(0.5, 1.5)),
                    normal(&[c]),
                ],
                count,
                move |x| train_with(x, true, norm),
            ));
        }
        cases.push(Case::new(
            format!("{shape:?} training without parameters"),
            vec![normal(&shape)],
            count,
            |x| train(x, false),
        ));
    }
    cases.push(Case::new(
        "[5, 7] training with weight and bias",
        vec![
            normal(&[5, 7]),
            value(&[7], Dist::Uniform(0.5, 1.5)),
            normal(&[7]),
        ],
        5,
        |x| train(x, true),
    ));
    cases.push(Case::new(
        "[3, 4, 6, 6] eval with weight and bias",
        vec![
            normal(&[3, 4, 6, 6]),
            normal(&[4]),
            value(&[4], Dist::Uniform(0.5, 1.5)),
            value(&[4], Dist::Uniform(0.5, 1.5)),
            normal(&[4]),
        ],
        1,
        |x| {
            one(x[0].batch_norm(
                Some((&x[1], &x[2])),
                Some(&x[3]),
                Some(&x[4]),
                false,
                0.1,
                1e-5,
            ))
        },
    ));
    cases
}
