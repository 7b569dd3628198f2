//! A graph node: the op's backward closure with what it saved, and the inputs that need grads.

use crate::{DType, Error, Result, Tensor};
use std::sync::{Arc, Mutex};

/// One op's backward. It runs with grad recording off and returns one gradient per input
/// (`None` where `needs[i]` is false or the input gets no gradient).
pub trait Backward: Send + Sync {
    fn name(&self) -> &'static str;
    fn backward(&self, grad: &Tensor, needs: &[bool]) -> Result<Vec<Option<Tensor>>>;

    /// The backward of an op with several outputs (`Tensor::recorded_outputs`): one gradient
    /// per output, `None` for an output nothing downstream used. One-output ops keep the
    /// default, which hands their gradient to `backward`.
    fn backward_outputs(
        &self,
        grads: &[Option<Tensor>],
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        match grads {
            [Some(g)] => self.backward(g, needs),
            _ => Err(Error::Backward(format!(
                "`{}` has one output but received {} gradients",
                self.name(),
                grads.len()
            ))),
        }
    }

    /// Whether `backward_onto` adds into the sums its inputs' gradients already hold, so the
    /// walk should hand them over. A lookup's backward (index_select's scatter of rows) is
    /// one: a tied embedding's weight gets the head's gradient first, and the lookup's rows
    /// go straight into it instead of into zeros that are then added to it.
    fn adds_onto(&self) -> bool {
        false
    }

    /// `backward_outputs` for an op that `adds_onto`. `sums[i]`, where present, is what input
    /// i's gradient has summed so far from its other consumers, held by nothing else, so the
    /// op may write into it. An op that takes `sums[i]` (leaving `None`) returns input i's
    /// whole gradient, that sum included; a sum left in place is added to what it returns.
    fn backward_onto(
        &self,
        grads: &[Option<Tensor>],
        needs: &[bool],
        _sums: &mut [Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        self.backward_outputs(grads, needs)
    }
}

pub struct Node {
    pub(crate) name: &'static str,
    /// How many tensors the op returned; each carries its index into this node.
    pub(crate) outputs: usize,
    /// One entry per op input; `None` for inputs that do not require grad.
    pub(crate) inputs: Vec<Option<Edge>>,
    /// Taken (and so freed, with everything it saved) by a backward that does not retain the graph.
    pub(crate) backward: Mutex<Option<Box<dyn Backward>>>,
}

impl Node {
    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// Where an input's gradient goes. An op's output is reached through its node alone: holding
/// the tensor would keep its data alive until backward even when no backward reads it (a
/// product's output that is only added to something, say), which is what the ops' saved
/// tensors decide.
pub(crate) enum Edge {
    /// A leaf that requires grad: its gradient accumulates into it.
    Leaf(Tensor),
    /// Output `output` of an op, with what a gradient for it is checked against.
    Op {
        node: Arc<Node>,
        output: usize,
        shape: Vec<usize>,
        dtype: DType,
    },
}

impl Edge {
    /// The edge into `t`'s gradient: its node, or `t` itself for a leaf.
    pub(crate) fn to(t: &Tensor) -> Edge {
        match t.grad_fn() {
            Some(node) => Edge::Op {
                node: node.clone(),
                output: t.output_index(),
                shape: t.shape().to_vec(),
                dtype: t.dtype(),
            },
            None => Edge::Leaf(t.clone()),
        }
    }

    /// Another handle to the same place (the node or leaf is shared, not copied).
    pub(crate) fn clone_ref(&self) -> Edge {
        match self {
            Edge::Leaf(t) => Edge::Leaf(t.clone()),
            Edge::Op {
                node,
                output,
                shape,
                dtype,
            } => Edge::Op {
                node: node.clone(),
                output: *output,
                shape: shape.clone(),
                dtype: *dtype,
            },
        }
    }

    /// Which of its node's outputs the edge reaches (0 for a leaf).
    pub(crate) fn output(&self) -> usize {
        match self {
            Edge::Leaf(_) => 0,
            Edge::Op { output, .. } => *output,
        }
    }

    /// How many gradients the edge's place collects: its node's outputs, or 1 for a leaf.
    pub(crate) fn slots(&self) -> usize {
        match self {
            Edge::Leaf(_) => 1,
            Edge::Op { node, .. } => node.outputs,
        }
    }

    /// A key unique among the live graph's edges: the leaf's or the node's address (shared by
    /// a node's outputs, whose gradients meet in one slot each).
    pub(crate) fn key(&self) -> usize {
        match self {
            Edge::Leaf(t) => t.id(),
            Edge::Op { node, .. } => Arc::as_ptr(node) as usize,
        }
    }

    pub(crate) fn shape(&self) -> &[usize] {
        match self {
            Edge::Leaf(t) => t.shape(),
            Edge::Op { shape, .. } => shape,
        }
    }

    pub(crate) fn dtype(&self) -> DType {
        match self {
            Edge::Leaf(t) => t.dtype(),
            Edge::Op { dtype, .. } => *dtype,
        }
    }
}

/// A tensor saved for backward. It is detached (so the graph holds no cycles and dropping it
/// never recurses) and remembers its storage version, so an in-place write since is an error.
#[derive(Clone)]
pub struct SavedTensor {
    tensor: Tensor,
    version: u64,
    op: &'static str,
}

impl SavedTensor {
    pub fn new(op: &'static str, t: &Tensor) -> Self {
        SavedTensor {
            tensor: t.detach(),
            version: t.storage_version(),
            op,
        }
    }

    pub fn get(&self) -> Result<&Tensor> {
        let now = self.tensor.storage_version();
        if now != self.version {
            return Err(Error::SavedTensorModified {
                op: self.op,
                saved: self.version,
                now,
            });
        }
        Ok(&self.tensor)
    }
}
