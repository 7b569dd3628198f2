//! The parity cases of every op in the op table, grouped by family. Sizes are odd on purpose:
//! 1, 7, 33, 1000 and 4097 columns hit the scalar tails, the vector paths and multi-block rows.

use super::harness::{fixed, normal, value, Case, Dist, Input};
use rusting_brain::{
    bce_with_logits, cross_entropy, huber_loss, linear_cross_entropy, mse_loss, Conv2dOptions,
    CrossEntropyOptions, DType, Generator, Reduction, Result, Tensor,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Elementwise,
    Binary,
    CompareSelect,
    Reduce,
    Softmax,
    Views,
    Index,
    Matmul,
    ConvPool,
    Losses,
    Creation,
    Norms,
    Attention,
}

/// (rows, columns) for ops with a column dim; rows stay small to keep the run short.
pub const SIZES: [(usize, usize); 5] = [(3, 1), (4, 7), (5, 33), (3, 1000), (4, 4097)];

fn one(t: Result<Tensor>) -> Result<Vec<Tensor>> {
    t.map(|t| vec![t])
}

fn i64s(values: Vec<i64>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(values, shape).expect("index tensor")
}

/// Seeded integers in [lo, hi) as an I64 tensor (indices).
fn index(lo: i64, hi: i64, shape: &[usize], seed: u64) -> Tensor {
    Tensor::randint(lo, hi, shape, Some(&mut Generator::new(seed))).expect("randint")
}

/// A seeded Bool mask, true with probability about one half.
fn mask(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, Some(&mut Generator::new(seed)))
        .and_then(|t| t.gt_scalar(0.0))
        .expect("mask")
}

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

fn views(f: impl Fn(&Tensor, usize, usize) -> Result<Vec<Tensor>> + Clone + 'static) -> Vec<Case> {
    let mut cases: Vec<Case> = SIZES
        .iter()
        .map(|&(r, c)| {
            let g = f.clone();
            Case::new(format!("[{r}, {c}]"), vec![normal(&[r, c])], 1, move |x| {
                g(&x[0], r, c)
            })
        })
        .collect();
    cases.push(Case::new(
        "[5, 33] transposed view",
        vec![normal(&[5, 33]).t()],
        1,
        move |x| f(&x[0], 5, 33),
    ));
    cases
}

fn matmul_case(label: &str, a: Input, b: Input, k: usize) -> Case {
    Case::new(label, vec![a, b], k, |x| one(x[0].matmul(&x[1])))
}

fn matmul_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = [
        (3, 7, 5),
        (5, 33, 1),
        (1, 1000, 7),
        (4, 4097, 3),
        (33, 65, 17),
    ]
    .iter()
    .map(|&(m, k, n)| {
        matmul_case(
            &format!("[{m}, {k}] x [{k}, {n}]"),
            normal(&[m, k]),
            normal(&[k, n]),
            k,
        )
    })
    .collect();
    cases.push(matmul_case(
        "[2, 1, 3, 33] x [5, 33, 7] (batched, broadcast)",
        normal(&[2, 1, 3, 33]),
        normal(&[5, 33, 7]),
        33,
    ));
    cases.push(matmul_case(
        "[4, 1000] x [1000] (matrix-vector)",
        normal(&[4, 1000]),
        normal(&[1000]),
        1000,
    ));
    cases.push(matmul_case(
        "[33] x [33, 7] (vector-matrix)",
        normal(&[33]),
        normal(&[33, 7]),
        33,
    ));
    cases.push(matmul_case(
        "[7, 33] transposed view x [33, 5]",
        normal(&[7, 33]).t(),
        normal(&[33, 5]),
        33,
    ));
    cases.push(matmul_case(
        "[7, 33] x [33, 5] transposed view",
        normal(&[7, 33]),
        normal(&[33, 5]).t(),
        33,
    ));
    cases.push(matmul_case(
        "[3, 1000] transposed x [1000, 9] transposed",
        normal(&[3, 1000]).t(),
        normal(&[1000, 9]).t(),
        1000,
    ));
    cases
}

fn conv_case(label: &str, x: &[usize], w: &[usize], bias: bool, opts: Conv2dOptions) -> Case {
    let mut inputs = vec![normal(x), normal(w)];
    if bias {
        inputs.push(normal(&[w[0]]));
    }
    let k = w[1] * w[2] * w[3];
    // The weight's gradient sums over every output position of every image.
    let (h, wd) = (x[2] + 2 * opts.padding.0, x[3] + 2 * opts.padding.1);
    let ho = (h - opts.dilation.0 * (w[2] - 1) - 1) / opts.stride.0 + 1;
    let wo = (wd - opts.dilation.1 * (w[3] - 1) - 1) / opts.stride.1 + 1;
    Case::new(label, inputs, k, move |t| {
        one(t[0].conv2d(&t[1], t.get(2), opts))
    })
    .grad_k(k.max(x[0] * ho * wo).max(w[0] * w[2] * w[3]))
}

fn conv_cases() -> Vec<Case> {
    let plain = Conv2dOptions {
        stride: (1, 1),
        padding: (0, 0),
        dilation: (1, 1),
        groups: 1,
    };
    vec![
        conv_case(
            "[2, 4, 9, 11] * [6, 2, 3, 3], stride (2, 1), padding 1, dilation (1, 2), 2 groups",
            &[2, 4, 9, 11],
            &[6, 2, 3, 3],
            true,
            Conv2dOptions {
                stride: (2, 1),
                padding: (1, 1),
                dilation: (1, 2),
                groups: 2,
            },
        ),
        conv_case(
            "[1, 3, 17, 33] * [8, 3, 3, 3], padding 1",
            &[1, 3, 17, 33],
            &[8, 3, 3, 3],
            true,
            Conv2dOptions {
                padding: (1, 1),
                ..plain
            },
        ),
        conv_case(
            "[2, 33, 5, 7] * [7, 33, 1, 1] (1x1, no bias)",
            &[2, 33, 5, 7],
            &[7, 33, 1, 1],
            false,
            plain,
        ),
        conv_case(
            "[1, 8, 7, 7] * [8, 1, 3, 3], depthwise, padding 1",
            &[1, 8, 7, 7],
            &[8, 1, 3, 3],
            true,
            Conv2dOptions {
                padding: (1, 1),
                groups: 8,
                ..plain
            },
        ),
    ]
}

type Pool = fn(&Tensor, (usize, usize), (usize, usize), (usize, usize)) -> Result<Tensor>;

fn pool_cases(f: Pool) -> Vec<Case> {
    [
        ((2, 2), (2, 2), (1, 1)),
        ((3, 3), (2, 2), (1, 1)),
        ((3, 3), (1, 1), (0, 0)),
        ((1, 1), (1, 1), (0, 0)),
    ]
    .into_iter()
    .map(|(k, s, p)| {
        Case::new(
            format!("[2, 3, 9, 11], kernel {k:?}, stride {s:?}, padding {p:?}"),
            vec![normal(&[2, 3, 9, 11])],
            k.0 * k.1,
            move |x| one(f(&x[0], k, s, p)),
        )
    })
    .collect()
}

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

/// Creation ops take the case's dtype and device from an anchor input.
fn creation(f: impl Fn(&Tensor, &[usize]) -> Result<Tensor> + Clone + 'static) -> Vec<Case> {
    SIZES
        .iter()
        .map(|&(r, c)| {
            let g = f.clone();
            Case::new(
                format!("[{r}, {c}]"),
                vec![normal(&[1]).frozen()],
                1,
                move |x| one(g(&x[0], &[r, c])),
            )
        })
        .collect()
}

/// Made on the host (where the seeded generators live) and moved to the anchor's device.
fn on_anchor(anchor: &Tensor, t: Result<Tensor>) -> Result<Tensor> {
    t?.to_device(anchor.device())?.contiguous()
}

fn gen(seed: u64) -> Generator {
    Generator::new(seed)
}

/// The family and cases of an op of the table, or `None` when it has no parity case yet.
pub fn cases(name: &str) -> Option<(Family, Vec<Case>)> {
    use Family::*;
    let n = Dist::Normal;
    let pos = Dist::Uniform(0.25, 4.0);
    Some(match name {
        // creation and random
        "zeros" => (
            Creation,
            creation(|a, s| Tensor::zeros(s, a.dtype(), a.device())),
        ),
        "ones" => (
            Creation,
            creation(|a, s| Tensor::ones(s, a.dtype(), a.device())),
        ),
        "full" => (
            Creation,
            creation(|a, s| Tensor::full(2.5, s, a.dtype(), a.device())),
        ),
        "arange" => (
            Creation,
            creation(|a, s| {
                let n = (s[0] * s[1]) as f64;
                on_anchor(a, Tensor::arange(-3.0, n - 3.0, 1.0, a.dtype()))
            }),
        ),
        "linspace" => (
            Creation,
            creation(|a, s| on_anchor(a, Tensor::linspace(-1.5, 2.0, s[1], a.dtype()))),
        ),
        // Drawn on the device itself: the CUDA Philox stream must give the CPU's values.
        "rand" => (
            Creation,
            creation(|a, s| Tensor::rand_on(s, a.dtype(), a.device(), Some(&mut gen(11)))),
        ),
        "randn" => (
            Creation,
            creation(|a, s| Tensor::randn_on(s, a.dtype(), a.device(), Some(&mut gen(12)))),
        ),
        "randint" => (
            Creation,
            creation(|a, s| on_anchor(a, Tensor::randint(-5, 1000, s, Some(&mut gen(13))))),
        ),
        // unary
        "neg" => (Elementwise, unary(n, |x| x.neg())),
        "abs" => (Elementwise, unary(n, |x| x.abs())),
        "exp" => (Elementwise, unary(Dist::Uniform(-2.0, 2.0), |x| x.exp())),
        "log" => (Elementwise, unary(pos, |x| x.log())),
        "sqrt" => (Elementwise, unary(pos, |x| x.sqrt())),
        "rsqrt" => (Elementwise, unary(pos, |x| x.rsqrt())),
        "sin" => (Elementwise, unary(n, |x| x.sin())),
        "cos" => (Elementwise, unary(n, |x| x.cos())),
        "tanh" => (Elementwise, unary(n, |x| x.tanh())),
        "sigmoid" => (Elementwise, unary(n, |x| x.sigmoid())),
        "relu" => (Elementwise, unary(n, |x| x.relu())),
        "gelu" => (Elementwise, unary(n, |x| x.gelu())),
        "gelu_tanh" => (Elementwise, unary(n, |x| x.gelu_tanh())),
        "silu" => (Elementwise, unary(n, |x| x.silu())),
        "swiglu" => (Elementwise, swiglu_cases()),
        "sign" => (Elementwise, unary(n, |x| x.sign())),
        "pow" => (
            Elementwise,
            unary(Dist::Uniform(0.5, 2.0), |x| x.pow_scalar(2.5)),
        ),
        "clamp" => (
            Elementwise,
            unary(n, |x| {
                if x.dtype().is_float() {
                    x.clamp(-0.5, 0.75)
                } else {
                    x.clamp(-2.0, 5.0)
                }
            }),
        ),
        "affine" => (Elementwise, unary(n, |x| x.affine(-2.0, 1.0))),
        // binary, broadcasting
        "add" => (Binary, binary(n, |a, b| a.add(b), |a, v| a.add_scalar(v))),
        "sub" => (Binary, binary(n, |a, b| a.sub(b), |a, v| a.sub_scalar(v))),
        "mul" => (Binary, binary(n, |a, b| a.mul(b), |a, v| a.mul_scalar(v))),
        "div" => (
            Binary,
            binary(
                Dist::Uniform(0.5, 2.0),
                |a, b| a.div(b),
                |a, v| a.div_scalar(v),
            ),
        ),
        "maximum" => (
            Binary,
            binary(n, |a, b| a.maximum(b), |a, v| a.maximum(&a.scalar_like(v)?)),
        ),
        "minimum" => (
            Binary,
            binary(n, |a, b| a.minimum(b), |a, v| a.minimum(&a.scalar_like(v)?)),
        ),
        // comparisons and selection
        "eq" => (CompareSelect, compare(|a, b| a.eq(b))),
        "ne" => (CompareSelect, compare(|a, b| a.ne(b))),
        "lt" => (CompareSelect, compare(|a, b| a.lt(b))),
        "le" => (CompareSelect, compare(|a, b| a.le(b))),
        "gt" => (CompareSelect, compare(|a, b| a.gt(b))),
        "ge" => (CompareSelect, compare(|a, b| a.ge(b))),
        "where" => (CompareSelect, where_cases()),
        "masked_fill" => (CompareSelect, masked_fill_cases()),
        // reductions
        "sum" => (Reduce, reduce(n, |x, d, k| x.sum_dims(d, k), |x| x.sum())),
        "mean" => (Reduce, reduce(n, |x, d, k| x.mean_dims(d, k), |x| x.mean())),
        "max" => (Reduce, reduce(n, |x, d, k| x.max_dims(d, k), |x| x.max())),
        "min" => (Reduce, reduce(n, |x, d, k| x.min_dims(d, k), |x| x.min())),
        "argmax" => (
            Reduce,
            reduce(
                n,
                |x, d, k| x.argmax(Some(d[0]), k),
                |x| x.argmax(None, false),
            ),
        ),
        "argmin" => (
            Reduce,
            reduce(
                n,
                |x, d, k| x.argmin(Some(d[0]), k),
                |x| x.argmin(None, false),
            ),
        ),
        "var" => (
            Reduce,
            reduce(
                n,
                |x, d, k| {
                    // Bessel's correction needs two values.
                    let unbiased = d
                        .iter()
                        .all(|&i| x.shape()[i.rem_euclid(x.rank() as isize) as usize] > 1);
                    x.var_dims(d, unbiased, k)
                },
                |x| x.var_dims(&[0, 1], true, false),
            ),
        ),
        "logsumexp" => (
            Reduce,
            reduce(
                n,
                |x, d, k| x.logsumexp(d, k),
                |x| x.logsumexp(&[0, 1], false),
            ),
        ),
        "layer_norm" => (Norms, norm_cases(true)),
        "rms_norm" => (Norms, norm_cases(false)),
        "scaled_dot_product_attention" => (Attention, attention_cases()),
        "rotary_embedding" => (Attention, rope_cases()),
        "softmax" => (Softmax, softmax(|x, d| x.softmax(d))),
        "log_softmax" => (Softmax, softmax(|x, d| x.log_softmax(d))),
        // views and copies
        "reshape" => (
            Views,
            views(|x, r, c| {
                Ok(vec![
                    x.reshape(&[-1])?,
                    x.reshape(&[c as isize, r as isize])?,
                ])
            }),
        ),
        "permute" => (
            Views,
            views(|x, r, c| {
                let x3 = x.reshape(&[1, r as isize, c as isize])?;
                Ok(vec![x3.permute(&[2, 0, 1])?, x3.permute(&[1, 2, 0])?])
            }),
        ),
        "transpose" => (
            Views,
            views(|x, _, _| Ok(vec![x.transpose(0, 1)?, x.unsqueeze(0)?.transpose(0, 2)?])),
        ),
        "narrow" => (
            Views,
            views(|x, r, c| Ok(vec![x.narrow(1, c / 3, c - c / 3)?, x.narrow(0, 1, r - 1)?])),
        ),
        "expand" => (
            Views,
            views(|x, r, c| {
                Ok(vec![
                    x.narrow(1, 0, 1)?.expand(&[r, c])?,
                    x.narrow(0, 1, 1)?.expand(&[2, r, c])?,
                ])
            }),
        ),
        "squeeze" => (
            Views,
            views(|x, _, _| {
                Ok(vec![
                    x.unsqueeze(1)?.squeeze(1)?,
                    x.unsqueeze(0)?.squeeze(0)?,
                ])
            }),
        ),
        "unsqueeze" => (
            Views,
            views(|x, _, _| Ok(vec![x.unsqueeze(0)?, x.unsqueeze(-1)?])),
        ),
        "contiguous" => (
            Views,
            views(|x, r, c| {
                Ok(vec![
                    x.t()?.contiguous()?,
                    x.narrow(1, c / 2, c - c / 2)?.contiguous()?,
                    x.narrow(0, 1, r - 1)?.t()?.contiguous()?,
                ])
            }),
        ),
        "to_dtype" => (
            Views,
            views(|x, _, _| DType::ALL.iter().map(|&d| x.to_dtype(d)).collect()),
        ),
        "cat" => (
            Views,
            views(|x, r, c| {
                let a = x.narrow(1, 0, c.div_ceil(2))?;
                let b = x.narrow(1, c / 2, c - c / 2)?;
                Ok(vec![
                    Tensor::cat(&[b.clone(), a.clone(), x.clone()], 1)?,
                    Tensor::cat(&[x.clone(), x.narrow(0, 1, r - 1)?], 0)?,
                    Tensor::cat(&[x.t()?, x.t()?], -1)?,
                ])
            }),
        ),
        "stack" => (Views, stack_cases()),
        "split" => (
            Views,
            views(|x, _, _| {
                let mut parts = x.split(3, -1)?;
                parts.extend(x.split(2, 0)?);
                Ok(parts)
            }),
        ),
        "chunk" => (
            Views,
            views(|x, _, _| {
                let mut parts = x.chunk(3, -1)?;
                parts.extend(x.chunk(2, 0)?);
                Ok(parts)
            }),
        ),
        "index_select" => (Index, index_select_cases()),
        "gather" => (Index, gather_cases()),
        "scatter_add" => (Index, scatter_add_cases()),
        // linear algebra, convolution, pooling
        "matmul" => (Matmul, matmul_cases()),
        "conv2d" => (ConvPool, conv_cases()),
        "max_pool2d" => (ConvPool, pool_cases(|x, k, s, p| x.max_pool2d(k, s, p))),
        "avg_pool2d" => (ConvPool, pool_cases(|x, k, s, p| x.avg_pool2d(k, s, p))),
        "upsample_nearest2d" => (
            ConvPool,
            vec![
                Case::new(
                    "[2, 3, 5, 7] by (2, 3)",
                    vec![normal(&[2, 3, 5, 7])],
                    1,
                    |x| one(x[0].upsample_nearest2d(2, 3)),
                )
                .grad_k(6),
                Case::new(
                    "[1, 2, 9, 1] by (1, 4)",
                    vec![normal(&[1, 2, 9, 1])],
                    1,
                    |x| one(x[0].upsample_nearest2d(1, 4)),
                )
                .grad_k(4),
            ],
        ),
        // losses
        "cross_entropy" => (Losses, cross_entropy_cases()),
        "linear_cross_entropy" => (Losses, linear_cross_entropy_cases()),
        "bce_with_logits" => (
            Losses,
            loss_cases(Dist::Uniform(0.0, 1.0), bce_with_logits, 2.0),
        ),
        "mse_loss" => (Losses, loss_cases(n, mse_loss, 1.0)),
        "huber_loss" => (Losses, loss_cases(n, huber, 1.0)),
        _ => return None,
    })
}

/// The head and loss as one op: 33 and 4097 classes, rows with an ignored target, the mean and
/// the sum, label smoothing. On CUDA in half precision it runs the chunked kernel path.
fn linear_cross_entropy_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (rows, d, classes, smoothing, red) in [
        (6, 16, 33, 0.0, Reduction::Mean),
        (5, 64, 4097, 0.1, Reduction::Sum),
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

fn index_select_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, &(r, c)) in SIZES.iter().enumerate() {
        let s = 600 + 10 * i as u64;
        cases.push(
            Case::new(
                format!("[{r}, {c}] dim 0, 7 indices"),
                vec![normal(&[r, c]), fixed(index(0, r as i64, &[7], s))],
                1,
                |x| one(x[0].index_select(0, &x[1])),
            )
            .grad_k(7),
        );
        let m = c.min(33);
        cases.push(
            Case::new(
                format!("[{r}, {c}] dim 1, {m} indices"),
                vec![normal(&[r, c]), fixed(index(0, c as i64, &[m], s + 1))],
                1,
                |x| one(x[0].index_select(1, &x[1])),
            )
            .grad_k(m),
        );
    }
    cases.push(
        Case::new(
            "[1000, 33] dim 0 (an embedding lookup), [2, 7] indices",
            vec![normal(&[1000, 33]), fixed(index(0, 1000, &[14], 690))],
            1,
            |x| one(x[0].index_select(0, &x[1])),
        )
        .grad_k(14),
    );
    cases
}

fn gather_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, &(r, c)) in SIZES.iter().enumerate() {
        let s = 700 + 10 * i as u64;
        let m = c.min(9);
        cases.push(
            Case::new(
                format!("[{r}, {c}] dim 1, [{r}, {m}] index"),
                vec![normal(&[r, c]), fixed(index(0, c as i64, &[r, m], s))],
                1,
                |x| one(x[0].gather(1, &x[1])),
            )
            .grad_k(m),
        );
        cases.push(
            Case::new(
                format!("[{r}, {c}] dim 0, [2, {c}] index"),
                vec![normal(&[r, c]), fixed(index(0, r as i64, &[2, c], s + 1))],
                1,
                |x| one(x[0].gather(0, &x[1])),
            )
            .grad_k(2),
        );
    }
    cases
}

fn scatter_add_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, &(r, c)) in SIZES.iter().enumerate() {
        let s = 800 + 10 * i as u64;
        cases.push(Case::new(
            format!("[{r}, {c}] dim 0, [6, {c}] index and source"),
            vec![
                normal(&[r, c]),
                fixed(index(0, r as i64, &[6, c], s)),
                normal(&[6, c]),
            ],
            6,
            |x| one(x[0].scatter_add(0, &x[1], &x[2])),
        ));
        let m = c.min(9);
        cases.push(Case::new(
            format!("[{r}, {c}] dim 1, [{r}, {m}] index and source"),
            vec![
                normal(&[r, c]),
                fixed(index(0, c as i64, &[r, m], s + 1)),
                normal(&[r, m]),
            ],
            m,
            |x| one(x[0].scatter_add(1, &x[1], &x[2])),
        ));
    }
    cases
}

fn stack_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = SIZES
        .iter()
        .map(|&(r, c)| {
            Case::new(
                format!("two [{r}, {c}]"),
                vec![normal(&[r, c]), normal(&[r, c])],
                1,
                |x| {
                    let both = [x[0].clone(), x[1].clone()];
                    Ok(vec![Tensor::stack(&both, 0)?, Tensor::stack(&both, -1)?])
                },
            )
        })
        .collect();
    cases.push(Case::new(
        "[5, 33] transposed view and [5, 33]",
        vec![normal(&[5, 33]).t(), normal(&[5, 33])],
        1,
        |x| {
            let both = [x[0].clone(), x[1].clone()];
            Ok(vec![Tensor::stack(&both, 1)?])
        },
    ));
    cases
}

/// Attention in the shapes the fused CUDA kernels take (head dims 64 and 128; query and key
/// counts off the 64-row tiles; grouped heads; causal with more keys than queries; a
/// token-major view as a projection leaves it) and one they leave to the composition (head dim
/// 32). The CPU reference always runs the composition, a chain of five half-precision ops
/// (scale, product, mask, softmax, product) whose own rounding reaches 110% of the single-op
/// allowance on these cases: hence the 2x half-precision slack.
fn attention_cases() -> Vec<Case> {
    use rusting_brain::AttentionOptions;
    let opts = |causal| AttentionOptions {
        causal,
        scale: None,
    };
    let mut cases = Vec::new();
    // (q shape, kv heads, keys, causal)
    for (q, kv, tk, causal) in [
        ([2, 4, 70, 64], 2, 70, true),
        ([1, 2, 33, 128], 2, 100, false),
        ([1, 2, 40, 64], 1, 130, true),
        ([1, 2, 20, 32], 2, 20, true),
    ] {
        let [b, _, tq, d] = q;
        cases.push(
            Case::new(
                format!("q {q:?} over {kv} kv heads x {tk} keys, causal {causal}"),
                vec![normal(&q), normal(&[b, kv, tk, d]), normal(&[b, kv, tk, d])],
                tk.max(d),
                move |x| one(x[0].scaled_dot_product_attention(&x[1], &x[2], opts(causal))),
            )
            .grad_k(tk.max(tq) * d)
            .half_slack(2.0),
        );
    }
    cases.push(
        Case::new(
            "token-major q, k, v [1, 80, 2, 64] viewed as [1, 2, 80, 64], causal",
            vec![
                normal(&[1, 80, 2, 64]),
                normal(&[1, 80, 2, 64]),
                normal(&[1, 80, 2, 64]),
            ],
            80,
            move |x| {
                let [q, k, v] = [0, 1, 2].map(|i| x[i].transpose(1, 2));
                one(q?.scaled_dot_product_attention(&k?, &v?, opts(true)))
            },
        )
        .grad_k(80 * 64)
        .half_slack(2.0),
    );
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

/// Rotary embedding with shared [seq, dim] tables, per-row [batch, 1, seq, dim] tables, a
/// token-major input view and a 2-D input. The tables are F32 (as the model keeps them) and
/// compared as outputs only: on CUDA they are constants.
fn rope_cases() -> Vec<Case> {
    fn table(shape: &[usize], seed: u64) -> Tensor {
        Tensor::randn(shape, DType::F32, Some(&mut Generator::new(seed))).expect("table")
    }
    let mut cases = Vec::new();
    for (x, t) in [
        (vec![2, 3, 5, 8], vec![5, 8]),
        (vec![2, 4, 33, 64], vec![2, 1, 33, 64]),
        (vec![7, 16], vec![7, 16]),
    ] {
        let (cos, sin) = (table(&t, 1), table(&t, 2));
        cases.push(Case::new(
            format!("x {x:?} with tables {t:?}"),
            vec![normal(&x)],
            2,
            move |v| {
                one(v[0].rotary_embedding(
                    &cos.to_device(v[0].device())?,
                    &sin.to_device(v[0].device())?,
                ))
            },
        ));
    }
    let (cos, sin) = (table(&[9, 64], 3), table(&[9, 64], 4));
    cases.push(Case::new(
        "token-major x [2, 9, 3, 64] viewed as [2, 3, 9, 64]",
        vec![normal(&[2, 9, 3, 64])],
        2,
        move |v| {
            let x = v[0].transpose(1, 2)?;
            one(x.rotary_embedding(&cos.to_device(x.device())?, &sin.to_device(x.device())?))
        },
    ));
    cases
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
