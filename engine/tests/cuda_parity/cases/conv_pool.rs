//! Convolution (strided, padded, dilated, grouped, depthwise, 1x1), pooling and upsampling.

use super::one;
use crate::harness::{normal, Case};
use rusting_brain::{Conv2dOptions, Result, Tensor};

pub const OPS: &[super::Entry] = &[
    ("conv2d", conv_cases),
    ("conv_transpose2d", conv_transpose_cases),
    ("max_pool2d", || {
        pool_cases(|x, k, s, p| x.max_pool2d(k, s, p))
    }),
    ("avg_pool2d", || {
        pool_cases(|x, k, s, p| x.avg_pool2d(k, s, p))
    }),
    ("upsample_nearest2d", upsample_cases),
];

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

fn upsample_cases() -> Vec<Case> {
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
    ]
}

/// Transposed convolutions: the upsampling shape of decoders (stride 2, padding 1,
/// output_padding 1), grouped with dilation, and 1x1 without a bias.
fn conv_transpose_cases() -> Vec<Case> {
    use rusting_brain::ConvTranspose2dOptions as O;
    let case = |label: &str, x: &[usize], w: &[usize], bias: bool, opts: O| {
        let mut inputs = vec![normal(x), normal(w)];
        if bias {
            inputs.push(normal(&[w[1] * opts.groups]));
        }
        // Each output sums over Cin/groups channels and the kernel taps that reach it; the
        // weight's gradient over every input position of every image.
        let k = w[0] / opts.groups * w[2] * w[3];
        Case::new(label, inputs, k, move |t| {
            one(t[0].conv_transpose2d(&t[1], t.get(2), opts))
        })
        .grad_k(k.max(x[0] * x[2] * x[3]))
    };
    vec![
        case(
            "[2, 8, 7, 9] * [8, 4, 3, 3], stride 2, padding 1, output_padding 1",
            &[2, 8, 7, 9],
            &[8, 4, 3, 3],
            true,
            O {
                stride: (2, 2),
                padding: (1, 1),
                output_padding: (1, 1),
                ..O::default()
            },
        ),
        case(
            "[1, 6, 5, 6] * [6, 2, 2, 3], 3 groups, dilation (2, 1)",
            &[1, 6, 5, 6],
            &[6, 2, 2, 3],
            true,
            O {
                dilation: (2, 1),
                groups: 3,
                ..O::default()
            },
        ),
        case(
            "[2, 33, 4, 5] * [33, 7, 1, 1] (1x1, no bias)",
            &[2, 33, 4, 5],
            &[33, 7, 1, 1],
            false,
            O::default(),
        ),
    ]
}
