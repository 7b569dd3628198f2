//! `backward()`: an iterative topological walk (no recursion, so a 100k-op chain is fine) that
//! runs each node's backward once all its consumers have contributed their gradients.

use super::grad_mode::NoGradGuard;
use super::node::Edge;
use crate::{Error, Result, Tensor};
use std::collections::{HashMap, HashSet};

impl Tensor {
    /// Backpropagates from a scalar (or one-element) tensor.
    pub fn backward(&self) -> Result<()> {
        self.backward_with(None, false)
    }

    /// Backpropagates `grad` (default: ones for a one-element tensor). With `retain_graph` the
    /// saved tensors stay, so backward can run through the same graph again.
    pub fn backward_with(&self, grad: Option<Tensor>, retain_graph: bool) -> Result<()> {
        if !self.requires_grad() {
            return Err(Error::Backward("the tensor does not require grad (no input had requires_grad set, or it was computed under no_grad)".into()));
        }
        let grad = match grad {
            Some(g) => {
                if g.shape() != self.shape() {
                    return Err(Error::ShapeMismatch { op: "backward", lhs: self.shape().to_vec(), rhs: g.shape().to_vec() });
                }
                g.to_dtype(self.dtype())?
            }
            None if self.numel() == 1 => Tensor::ones_like(self)?,
            None => {
                return Err(Error::Backward(format!(
                    "backward() without a gradient needs a one-element tensor, got shape {:?}; pass the output gradient",
                    self.shape()
                )))
            }
        };
        let _guard = NoGradGuard::new();
        let root = Edge::to(self);
        // Per node (or leaf), one gradient slot per output, summed as consumers contribute.
        let mut grads: HashMap<usize, Vec<Option<Tensor>>> = HashMap::new();
        merge(&mut grads, &root, grad)?;
        for edge in topological_order(root) {
            let Some(slots) = grads.remove(&edge.key()) else {
                continue;
            };
            let node = match &edge {
                Edge::Leaf(t) => {
                    if let Some(g) = &slots[0] {
                        t.accumulate_grad(g)?;
                    }
                    continue;
                }
                Edge::Op { node, .. } => node,
            };
            let input_grads = {
                let mut slot = node.backward.lock().unwrap_or_else(|e| e.into_inner());
                let Some(bw) = slot.as_ref() else {
                    return Err(Error::GraphFreed { op: node.name });
                };
                let needs: Vec<bool> = node.inputs.iter().map(|i| i.is_some()).collect();
                let out = bw.backward_outputs(&slots, &needs)?;
                if !retain_graph {
                    *slot = None;
                }
                out
            };
            if input_grads.len() != node.inputs.len() {
                return Err(Error::Backward(format!(
                    "`{}` returned {} gradients for {} inputs",
                    node.name,
                    input_grads.len(),
                    node.inputs.len()
                )));
            }
            for (input, ig) in node.inputs.iter().zip(input_grads) {
                let (Some(input), Some(ig)) = (input, ig) else {
                    continue;
                };
                if ig.shape() != input.shape() {
                    return Err(Error::Backward(format!(
                        "`{}` produced a gradient of shape {:?} for an input of shape {:?}",
                        node.name,
                        ig.shape(),
                        input.shape()
                    )));
                }
                let ig = if ig.dtype() != input.dtype() {
                    ig.to_dtype(input.dtype())?
                } else {
                    ig
                };
                merge(&mut grads, input, ig)?;
            }
        }
        Ok(())
    }
}

/// Adds `g` into the slot of `edge`'s output.
fn merge(grads: &mut HashMap<usize, Vec<Option<Tensor>>>, edge: &Edge, g: Tensor) -> Result<()> {
    let slots = grads
        .entry(edge.key())
        .or_insert_with(|| vec![None; edge.slots()]);
    let slot = &mut slots[edge.output()];
    *slot = Some(match slot.take() {
        Some(prev) => prev.add(&g)?,
        None => g,
    });
    Ok(())
}

/// Edges reachable from `root`, each after all of its consumers.
fn topological_order(root: Edge) -> Vec<Edge> {
    let mut post: Vec<Edge> = Vec::new();
    let mut visited: HashSet<usize> = HashSet::new();
    // (edge, children pushed?) frames of an explicit DFS stack.
    let mut stack: Vec<(Edge, bool)> = vec![(root, false)];
    while let Some((e, expanded)) = stack.pop() {
        if expanded {
            post.push(e);
            continue;
        }
        if !visited.insert(e.key()) {
            continue;
        }
        let inputs: Vec<Edge> = match &e {
            Edge::Op { node, .. } => node.inputs.iter().flatten().map(Edge::clone_ref).collect(),
            Edge::Leaf(_) => Vec::new(),
        };
        stack.push((e, true));
        for i in inputs {
            if !visited.contains(&i.key()) {
                stack.push((i, false));
            }
        }
    }
    post.reverse();
    post
}

#[cfg(test)]
mod tests {
    use crate::autograd::Backward;
    use crate::{DType, Error, Result, Tensor};

    /// A recorded op whose backward is missing, as a new op's would be before it is written.
    struct Missing;

    impl Backward for Missing {
        fn name(&self) -> &'static str {
            "missing_backward"
        }
        fn backward(&self, _: &Tensor, _: &[bool]) -> Result<Vec<Option<Tensor>>> {
            Err(Error::NoBackward { op: self.name() })
        }
    }

    #[test]
    fn backward_through_an_op_without_a_backward_names_the_op() {
        let x = Tensor::from_f64s(&[0.5], &[1], DType::F64).unwrap();
        let x = x.requires_grad_().unwrap();
        let y = x.exp().unwrap().detach().recorded(&[&x], || Missing);
        let y = y.sum().unwrap();
        assert!(matches!(
            y.backward(),
            Err(Error::NoBackward {
                op: "missing_backward"
            })
        ));
    }
}
