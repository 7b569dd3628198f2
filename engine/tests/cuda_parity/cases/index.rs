//! Index ops: index_select (an embedding lookup among them), gather and scatter_add.

use super::{index, one, SIZES};
use crate::harness::{fixed, normal, Case};

pub const OPS: &[super::Entry] = &[
    ("index_select", index_select_cases),
    ("gather", gather_cases),
    ("scatter_add", scatter_add_cases),
];

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
    // Rows of whole 16-byte words take the row kernel (`index_rows16`).
    cases.push(
        Case::new(
            "[1000, 64] dim 0 (an embedding lookup of whole words), [14] indices",
            vec![normal(&[1000, 64]), fixed(index(0, 1000, &[14], 691))],
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
