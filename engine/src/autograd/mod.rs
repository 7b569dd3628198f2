//! The dynamic graph: ops record a `Node` per output when an input requires grad, and
//! `Tensor::backward` walks the nodes in reverse topological order.

mod engine;
mod grad_mode;
mod node;

pub use grad_mode::{is_grad_enabled, no_grad, NoGradGuard};
pub(crate) use node::Edge;
pub use node::{Backward, Node, SavedTensor};
