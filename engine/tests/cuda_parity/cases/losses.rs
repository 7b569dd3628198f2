//! Losses: cross_entropy (ignored targets, label smoothing, every reduction),
//! linear_cross_entropy, bce_with_logits, mse_loss and huber_loss.

use super::{i64s, index, one, SIZES};
use crate::harness::{fixed, normal, value, Case, Dist};
use rusting_brain::{
    bce_with_logits, cross_entropy, huber_loss, linear_cross_entropy, mse_loss,
    CrossEntropyOptions, Reduction, Result, Tensor,
};

pub const OPS: &[super::Entry] = &[
    ("cross_entropy", cross_entropy_cases),
    ("linear_cross_entropy", linear_cross_entropy_cases),
    ("bce_with_logits", || {
        loss_cases(Dist::Uniform(0.0, 1.0), bce_with_logits, 2.0)
    }),
    ("mse_loss", || loss_cases(Dist::Normal, mse_loss, 1.0)),
    ("huber_loss", || loss_cases(Dist::Normal, huber, 1.0)),
];

fn cross_entropy_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // One class gives a loss of exactly zero, so both devices return rounding noise (~1e-8)
    // that no relative tolerance covers; the other sizes test the kernel.
    for (i, &(r, c)) in SIZES.iter().enumerate().filter(|(_, &(_, c))| c > 1) {
        let mut t: Vec<i64> = index(0, c as i64, &[r], 100 + i as u64)
            .to_vec()
            .expect("targets");
        t[1] = -100;
        let targets = i64s(t, &[r]);
        for (name, opts) in [
            ("mean", CrossEntropyOptions::default()),
            (
                "label smoothing 0.1",
                CrossEntropyOptions {
                    label_smoothing: 0.1,
                    ..Default::default()
                },
            ),
            (
                "sum",
                CrossEntropyOptions {
                    reduction: Reduction::Sum,
                    ..Default::default()
                },
            ),
            (
                "none",
                CrossEntropyOptions {
                    reduction: Reduction::None,
                    ..Default::default()
                },
            ),
        ] {
            cases.push(Case::new(
                format!("[{r}, {c}] logits, one ignored target, {name}"),
                vec![normal(&[r, c]), fixed(targets.clone())],
                c,
                move |x| one(cross_entropy(&x[0], &x[1], opts)),
            ));
        }
    }
    cases.push(Case::new(
        "[2, 33, 3] logits (class dim second), [2, 3] targets",
        vec![normal(&[2, 33, 3]), fixed(index(0, 33, &[2, 3], 7))],
        33,
        |x| one(cross_entropy(&x[0], &x[1], CrossEntropyOptions::default())),
    ));
    cases
}

type Loss = fn(&Tensor, &Tensor, Reduction) -> Result<Tensor>;

/// `half_slack`: bce_with_logits is a chain of five BF16 ops whose terms cancel
/// (relu(x) - x y plus log(1 + exp(-|x|))), so even the CPU's own BF16 path misses the F32 result by more than
/// the default allowance.
fn loss_cases(target: Dist, f: Loss, half_slack: f64) -> Vec<Case> {
    let mut cases = Vec::new();
    for &(r, c) in &SIZES {
        for red in [Reduction::Mean, Reduction::Sum, Reduction::None] {
            let k = if red == Reduction::None { 1 } else { r * c };
            cases.push(
                Case::new(
                    format!("[{r}, {c}], {red:?}"),
                    vec![normal(&[r, c]), value(&[r, c], target)],
                    k,
                    move |x| one(f(&x[0], &x[1], red)),
                )
                .half_slack(half_slack),
            );
        }
    }
    cases
}

fn huber(a: &Tensor, b: &Tensor, r: Reduction) -> Result<Tensor> {
    huber_loss(a, b, 0.5, r)
}

/// The head and loss as one op: rows with an ignored target, the mean and the sum, label
/// smoothing. On CUDA in half precision it runs the chunked kernel path, whose logits are in
/// that precision and whose loss and gradient come from one kernel: 33 and 4097 classes take its
/// element-wise loops, 36 and 4100 its words of four logits, 300 rows of 4100 more rows than the grid has blocks, and rows of 60,000
/// logits more words a thread than the four it keeps in flight at 1,024 threads.
fn linear_cross_entropy_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (rows, d, classes, smoothing, red) in [
        (6, 16, 33, 0.0, Reduction::Mean),
        (5, 64, 4097, 0.1, Reduction::Sum),
        (6, 16, 36, 0.1, Reduction::Mean),
        (300, 32, 4100, 0.0, Reduction::Mean),
        (3, 16, 60_000, 0.1, Reduction::Sum),
    ] {
        let targets: Vec<i64> = (0..rows as i64)
            .map(|r| {
                if r == 1 {
                    -100
                } else {
                    (r * 7919) % classes as i64
                }
            })
            .collect();
        let t = i64s(targets, &[rows]);
        cases.push(
            Case::new(
                format!(
                    "hidden [{rows}, {d}], weight [{classes}, {d}], smoothing {smoothing}, {red:?}"
                ),
                // Logits of about unit spread: wider ones turn the inputs' own half-precision
                // rounding into percent-level changes of a saturated softmax.
                vec![
                    value(&[rows, d], Dist::Uniform(-0.25, 0.25)),
                    normal(&[classes, d]),
                ],
                rows * d,
                move |x| {
                    let opts = CrossEntropyOptions {
                        label_smoothing: smoothing,
                        reduction: red,
                        ..Default::default()
                    };
                    one(linear_cross_entropy(
                        &x[0],
                        &x[1],
                        &t.to_device(x[0].device())?,
                        opts,
                    ))
                },
            )
            .half_slack(2.0),
        );
    }
    cases
}
