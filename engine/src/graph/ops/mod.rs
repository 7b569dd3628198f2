//! The operators a graph can hold, by ONNX name, each a function from a node (its inputs and
//! attributes) to its outputs, written with the engine's ops so that a graph runs on every
//! device the ops do and gradients flow through it. One family per file.
//!
//! An operator missing here, or an attribute value an operator here does not implement, is an
//! error naming the operator, its node and the opset; nothing falls back silently.

mod elementwise;
mod indexing;
mod layers;
mod recurrent;
mod reduce;
mod resize;
mod shape;

use super::node::Node;
use crate::{Result, Tensor};

/// What an operator computes: its outputs in order.
pub type OpFn = fn(&Node) -> Result<Vec<Tensor>>;

/// Every family's table.
const FAMILIES: &[&[(&str, OpFn)]] = &[
    elementwise::OPS,
    indexing::OPS,
    layers::OPS,
    recurrent::OPS,
    reduce::OPS,
    resize::OPS,
    shape::OPS,
];

/// Every operator by its ONNX name.
pub fn lookup(op_type: &str) -> Option<OpFn> {
    FAMILIES
        .iter()
        .flat_map(|ops| ops.iter())
        .find(|(name, _)| *name == op_type)
        .map(|(_, f)| *f)
}

/// The names of every supported operator, sorted (for help texts and error messages).
pub fn supported() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = FAMILIES
        .iter()
        .flat_map(|ops| ops.iter().map(|(name, _)| *name))
        .collect();
    names.sort_unstable();
    names
}

/// One output.
fn one(t: Tensor) -> Result<Vec<Tensor>> {
    Ok(vec![t])
}
