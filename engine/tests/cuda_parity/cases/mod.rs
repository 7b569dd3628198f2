//! The parity cases of every op in the op table, one file per op family. Each family file holds
//! a table `OPS` of (op name, builder of its cases), so adding an op is one line in its family's
//! table. Sizes are odd on purpose: 1, 7, 33, 1000 and 4097 columns hit the scalar tails, the
//! vector paths and multi-block rows.

mod attention;
mod binary;
mod compare_select;
mod conv_pool;
mod creation;
mod elementwise;
mod index;
mod losses;
mod matmul;
mod norms;
mod reduce;
mod softmax;
mod sorting;
mod views;

use crate::harness::Case;
use rusting_brain::{DType, Generator, Result, Tensor};

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

/// An op of the op table and the builder of its cases (run only when that op is checked).
pub type Entry = (&'static str, fn() -> Vec<Case>);

/// Every family with its table.
const FAMILIES: [(Family, &[Entry]); 14] = [
    (Family::Creation, creation::OPS),
    (Family::Elementwise, elementwise::OPS),
    (Family::Binary, binary::OPS),
    (Family::CompareSelect, compare_select::OPS),
    (Family::Reduce, reduce::OPS),
    (Family::Norms, norms::OPS),
    (Family::Attention, attention::OPS),
    (Family::Softmax, softmax::OPS),
    (Family::Views, views::OPS),
    (Family::Index, index::OPS),
    (Family::Index, sorting::OPS),
    (Family::Matmul, matmul::OPS),
    (Family::ConvPool, conv_pool::OPS),
    (Family::Losses, losses::OPS),
];

/// The family and cases of an op of the table, or `None` when it has no parity case yet.
pub fn cases(name: &str) -> Option<(Family, Vec<Case>)> {
    FAMILIES.iter().find_map(|&(family, ops)| {
        ops.iter()
            .find(|(op, _)| *op == name)
            .map(|(_, build)| (family, build()))
    })
}

/// The op name of every entry of every family, in table order.
pub fn entry_names() -> Vec<&'static str> {
    FAMILIES
        .iter()
        .flat_map(|(_, ops)| ops.iter().map(|(op, _)| *op))
        .collect()
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
