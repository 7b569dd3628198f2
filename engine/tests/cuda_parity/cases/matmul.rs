//! Matrix products: plain, batched with broadcasting, matrix-vector and transposed operands;
//! einsum, which runs as them.

use super::one;
use crate::harness::{fixed, normal, Case, Input};
use rusting_brain::Tensor;

pub const OPS: &[super::Entry] = &[
    ("matmul", matmul_cases),
    ("einsum", einsum_cases),
    ("grouped_matmul", grouped_matmul_cases),
];

/// A mixture of experts' products: groups across several row tiles, a partial tile, an empty
/// group, and the weights read through a transposed view (the input gradient's case).
fn grouped_matmul_cases() -> Vec<Case> {
    let offsets = |o: &[i64]| fixed(Tensor::from_vec(o.to_vec(), &[o.len()]).unwrap());
    vec![
        Case::new(
            "[300, 48] in groups 70, 0, 130, 100 x [4, 40, 48]",
            vec![
                normal(&[300, 48]),
                normal(&[4, 40, 48]),
                offsets(&[0, 70, 70, 200, 300]),
            ],
            48,
            |x| one(x[0].grouped_matmul(&x[1], &x[2])),
        ),
        Case::new(
            "[9, 130] in groups 4, 5 x [2, 70, 130] read as a transposed view",
            vec![
                normal(&[9, 130]),
                normal(&[2, 130, 70]),
                offsets(&[0, 4, 9]),
            ],
            130,
            |x| one(x[0].grouped_matmul(&x[1].transpose(1, 2)?, &x[2])),
        ),
    ]
}

/// Attention's score pattern and a contraction over three operands.
fn einsum_cases() -> Vec<Case> {
    vec![
        Case::new(
            "bhqd,bhkd->bhqk [2, 3, 17, 32] [2, 3, 9, 32]",
            vec![normal(&[2, 3, 17, 32]), normal(&[2, 3, 9, 32])],
            32,
            |x| one(Tensor::einsum("bhqd,bhkd->bhqk", x)),
        ),
        Case::new(
            "ij,jk,k->i [7, 40] [40, 5] [5]",
            vec![normal(&[7, 40]), normal(&[40, 5]), normal(&[5])],
            200,
            |x| one(Tensor::einsum("ij,jk,k->i", x)),
        ),
    ]
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
