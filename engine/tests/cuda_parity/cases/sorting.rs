//! Sorting and counting: sort, argsort, topk, unique and bincount. They order on the host on
//! both devices, so these cases check the round trip (keys to the host, indices back, values
//! gathered on the device) and the gradients through the gather. The values are small whole
//! numbers, exact in every dtype and full of ties, so the stable tie order is compared too.

use super::{one, SIZES};
use crate::harness::{value, Case, Dist};
use rusting_brain::Tensor;

const TIES: Dist = Dist::Ints(-8, 8);

pub const OPS: &[super::Entry] = &[
    ("sort", sort_cases),
    ("argsort", argsort_cases),
    ("topk", topk_cases),
    ("unique", unique_cases),
    ("bincount", bincount_cases),
];

fn pair(t: rusting_brain::Result<(Tensor, Tensor)>) -> rusting_brain::Result<Vec<Tensor>> {
    t.map(|(a, b)| vec![a, b])
}

fn sort_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for &(r, c) in &SIZES {
        cases.push(Case::new(
            format!("[{r}, {c}] along -1, ascending"),
            vec![value(&[r, c], TIES)],
            1,
            |x| pair(x[0].sort(-1, false)),
        ));
        cases.push(Case::new(
            format!("[{r}, {c}] along 0, descending"),
            vec![value(&[r, c], TIES)],
            1,
            |x| pair(x[0].sort(0, true)),
        ));
    }
    cases.push(Case::new(
        "[5, 33] transposed view along 1",
        vec![value(&[5, 33], TIES).t()],
        1,
        |x| pair(x[0].sort(1, false)),
    ));
    cases
}

fn argsort_cases() -> Vec<Case> {
    SIZES
        .iter()
        .map(|&(r, c)| {
            Case::new(
                format!("[{r}, {c}] along -1, descending"),
                vec![value(&[r, c], TIES)],
                1,
                |x| one(x[0].argsort(-1, true)),
            )
        })
        .collect()
}

fn topk_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for &(r, c) in &SIZES {
        let k = c.min(5);
        cases.push(Case::new(
            format!("[{r}, {c}] top {k} along -1"),
            vec![value(&[r, c], TIES)],
            1,
            move |x| pair(x[0].topk(k, -1, true)),
        ));
        cases.push(Case::new(
            format!("[{r}, {c}] smallest 2 along 0"),
            vec![value(&[r, c], TIES)],
            1,
            |x| pair(x[0].topk(2, 0, false)),
        ));
    }
    cases
}

fn unique_cases() -> Vec<Case> {
    SIZES
        .iter()
        .map(|&(r, c)| {
            Case::new(
                format!("[{r}, {c}] values and counts"),
                vec![value(&[r, c], TIES)],
                1,
                |x| pair(x[0].unique_counts()),
            )
        })
        .collect()
}

fn bincount_cases() -> Vec<Case> {
    SIZES
        .iter()
        .map(|&(_, c)| {
            Case::new(
                format!("[{c}] ids in 0..8, minlength 10"),
                vec![value(&[c], Dist::Ints(0, 8))],
                1,
                |x| one(x[0].bincount(10)),
            )
        })
        .collect()
}
