//! `backward()`: an iterative topological walk (no recursion, so a 100k-op chain is fine) that
//! runs each node's backward once all its consumers have contributed their gradients.

use super::grad_mode::NoGradGuard;
use super::node::{Edge, Node};
use crate::{Error, Result, Tensor};
use std::collections::{HashMap, HashSet};

/// What `backward_notifying` calls with each leaf whose gradient is complete.
pub type LeafHook<'a> = dyn FnMut(&Tensor) -> Result<()> + 'a;

impl Tensor {
    /// Backpropagates from a scalar (or one-element) tensor.
    pub fn backward(&self) -> Result<()> {
        self.backward_with(None, false)
    }

    /// Backpropagates `grad` (default: ones for a one-element tensor). With `retain_graph` the
    /// saved tensors stay, so backward can run through the same graph again.
    pub fn backward_with(&self, grad: Option<Tensor>, retain_graph: bool) -> Result<()> {
        self.run_backward(grad, retain_graph, None)
    }

    /// `backward_with`, calling `on_leaf` with each leaf as soon as its gradient from this
    /// backward is in: right after the last op that feeds it, so the rest of the backward is
    /// still to be queued. A data-parallel trainer starts reducing a bucket of gradients there,
    /// while the device works through the earlier layers (DDP's overlap). A leaf that gets no
    /// gradient is not reported. The gradient reported is dense and shares no memory with a
    /// gradient still to flow (one that does, such as the two inputs of an add sharing one, is
    /// copied first), so `on_leaf` may start changing it in place.
    pub fn backward_notifying(
        &self,
        grad: Option<Tensor>,
        retain_graph: bool,
        on_leaf: &mut LeafHook<'_>,
    ) -> Result<()> {
        self.run_backward(grad, retain_graph, Some(on_leaf))
    }

    fn run_backward(
        &self,
        grad: Option<Tensor>,
        retain_graph: bool,
        mut on_leaf: Option<&mut LeafHook<'_>>,
    ) -> Result<()> {
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
        let order = topological_order(root);
        let last_use = last_consumers(&order);
        // A leaf's gradient is complete once its last consumer has run; it is accumulated
        // there, not at the leaf's own (late) place in the order. Only a root that is itself a
        // leaf is reached in the loop with its slot still there.
        let mut finish_leaf = |grads: &mut HashMap<usize, Vec<Option<Tensor>>>, t: &Tensor| {
            let Some(g) = grads.remove(&t.id()).and_then(|mut slots| slots[0].take()) else {
                return Ok(());
            };
            let Some(hook) = on_leaf.as_mut() else {
                return t.accumulate_grad(&g);
            };
            // A leaf that already has a gradient gets a fresh sum; only a first one is the
            // very tensor the backward made, which may be strided or shared.
            let shared = || {
                grads
                    .values()
                    .flatten()
                    .flatten()
                    .any(|p| p.shares_storage(&g))
            };
            let g = if t.grad().is_some() || (g.layout().is_dense() && !shared()) {
                g
            } else {
                g.contiguous_copy()?
            };
            t.accumulate_grad(&g)?;
            hook(t)
        };
        for (at, edge) in order.iter().enumerate() {
            let node = match edge {
                Edge::Leaf(t) => {
                    finish_leaf(&mut grads, t)?;
                    continue;
                }
                Edge::Op { node, .. } => node,
            };
            if let Some(slots) = grads.remove(&edge.key()) {
                run_node(node, &slots, retain_graph, &mut grads)?;
            }
            for input in node.inputs.iter().flatten() {
                if let Edge::Leaf(t) = input {
                    if last_use.get(&t.id()) == Some(&at) {
                        finish_leaf(&mut grads, t)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Runs `node`'s backward on the gradients of its outputs and adds what it returns into its
/// inputs' slots.
fn run_node(
    node: &Node,
    slots: &[Option<Tensor>],
    retain_graph: bool,
    grads: &mut HashMap<usize, Vec<Option<Tensor>>>,
) -> Result<()> {
    let mut sums: Vec<Option<Tensor>> = vec![None; node.inputs.len()];
    let input_grads = {
        let mut slot = node.backward.lock().unwrap_or_else(|e| e.into_inner());
        let Some(bw) = slot.as_ref() else {
            return Err(Error::GraphFreed { op: node.name });
        };
        let needs: Vec<bool> = node.inputs.iter().map(|i| i.is_some()).collect();
        let out = if bw.adds_onto() {
            for (sum, input) in sums.iter_mut().zip(&node.inputs) {
                *sum = input.as_ref().and_then(|e| take_sole_sum(grads, e));
            }
            bw.backward_onto(slots, &needs, &mut sums)
        } else {
            bw.backward_outputs(slots, &needs)
        };
        // A sum the op did not take goes back, whatever the op returned.
        for (sum, input) in sums.iter_mut().zip(&node.inputs) {
            if let (Some(sum), Some(input)) = (sum.take(), input) {
                merge(grads, input, sum)?;
            }
        }
        if !retain_graph {
            *slot = None;
        }
        out?
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
        merge(grads, input, ig)?;
    }
    Ok(())
}

/// The gradient summed so far into `edge`'s slot, taken out for an op to add into in place,
/// if nothing else holds its memory (another slot may share it: an add hands one gradient to
/// both of its inputs).
fn take_sole_sum(grads: &mut HashMap<usize, Vec<Option<Tensor>>>, edge: &Edge) -> Option<Tensor> {
    let slot = grads.get_mut(&edge.key())?.get_mut(edge.output())?;
    match slot {
        Some(t) if t.is_sole_owner() => slot.take(),
        _ => None,
    }
}

/// For each leaf, the position in `order` of the last op that takes it as an input.
fn last_consumers(order: &[Edge]) -> HashMap<usize, usize> {
    let mut last = HashMap::new();
    for (at, edge) in order.iter().enumerate() {
        if let Edge::Op { node, .. } = edge {
            for input in node.inputs.iter().flatten() {
                if let Edge::Leaf(t) = input {
                    last.insert(t.id(), at);
                }
            }
        }
    }
    last
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
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

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

    /// An identity op whose backward notes that it ran.
    struct Probe(Arc<AtomicBool>);

    impl Backward for Probe {
        fn name(&self) -> &'static str {
            "probe"
        }
        fn backward(&self, grad: &Tensor, _: &[bool]) -> Result<Vec<Option<Tensor>>> {
            self.0.store(true, Ordering::SeqCst);
            Ok(vec![Some(grad.clone())])
        }
    }

    /// A leaf used only near the loss is reported, with its gradient in, before the backward
    /// reaches the ops under it: a data-parallel trainer reduces it while those still run.
    /// Each leaf is reported once, a leaf used twice after both uses.
    #[test]
    fn a_leaf_is_reported_once_right_after_its_last_consumer() {
        let leaf = |v: f64| {
            Tensor::from_f64s(&[v, v + 1.0], &[2], DType::F64)
                .unwrap()
                .requires_grad_()
                .unwrap()
        };
        let (x, w1, w2) = (leaf(0.5), leaf(2.0), leaf(-1.0));
        let ran = Arc::new(AtomicBool::new(false));
        let h = x.mul(&w1).unwrap();
        let h = h.detach().recorded(&[&h], || Probe(ran.clone()));
        // h first: the walk's order puts w2 last among the leaves.
        let loss = h.mul(&w2).unwrap().add(&x).unwrap().sum().unwrap();
        let mut reported = Vec::new();
        loss.backward_notifying(None, false, &mut |t| {
            let name = [(&x, "x"), (&w1, "w1"), (&w2, "w2")]
                .iter()
                .find(|(p, _)| p.id() == t.id())
                .map(|(_, n)| *n)
                .unwrap();
            assert!(t.grad().is_some(), "{name} is reported with its gradient");
            reported.push((name, ran.load(Ordering::SeqCst)));
            Ok(())
        })
        .unwrap();
        reported.sort();
        assert_eq!(
            reported,
            [("w1", true), ("w2", false), ("x", true)],
            "(leaf, whether the op under w2 had run when it was reported)"
        );
        // x's gradient holds both of its uses: w1 * w2 from the product, 1 from the add.
        assert_eq!(x.grad().unwrap().to_vec_f64().unwrap(), [-1.0, 1.0]);
    }

    /// In x * w + b the add hands one gradient to both of its inputs, so b's would share
    /// memory with the one still flowing to the product. The reported gradient is a copy:
    /// changing it in place (as a reduction across ranks does) leaves w's gradient alone.
    #[test]
    fn a_reported_gradient_shares_no_memory_with_one_still_to_flow() {
        let leaf = |v: f64| {
            Tensor::from_f64s(&[v, v + 1.0], &[2], DType::F64)
                .unwrap()
                .requires_grad_()
                .unwrap()
        };
        let (x, w, b) = (leaf(3.0), leaf(1.0), leaf(0.0));
        let loss = x.mul(&w).unwrap().add(&b).unwrap().sum().unwrap();
        loss.backward_notifying(None, false, &mut |t| {
            if t.id() == b.id() {
                t.grad().unwrap().mul_scalar_(100.0)?;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(b.grad().unwrap().to_vec_f64().unwrap(), [100.0, 100.0]);
        assert_eq!(w.grad().unwrap().to_vec_f64().unwrap(), [3.0, 4.0]);
    }

    /// Stands for a tied head: takes the lookup's rows and the table, and hands the table a
    /// fresh gradient of 0.5s, noting its storage; with `keep`, it also keeps a handle to that
    /// gradient, as something else still reading it would.
    struct TiedHead {
        rows: usize,
        storage: Arc<AtomicUsize>,
        keep: Option<Arc<Mutex<Option<Tensor>>>>,
    }

    impl Backward for TiedHead {
        fn name(&self) -> &'static str {
            "tied_head"
        }
        fn backward(&self, _: &Tensor, _: &[bool]) -> Result<Vec<Option<Tensor>>> {
            let d_rows = Tensor::from_f64s(&vec![1.0; self.rows * 2], &[self.rows, 2], DType::F64)?;
            let d_table = Tensor::from_f64s(&[0.5; 8], &[4, 2], DType::F64)?;
            self.storage.store(
                Arc::as_ptr(d_table.storage_cell()) as usize,
                Ordering::SeqCst,
            );
            if let Some(keep) = &self.keep {
                *keep.lock().unwrap() = Some(d_table.clone());
            }
            Ok(vec![Some(d_rows), Some(d_table)])
        }
    }

    /// A table [4, 2] looked up at ids, then used again by a "head" that runs first in the
    /// backward; returns the table and where the head's gradient for it lived.
    fn tied_lookup(ids: &[i64], keep: Option<Arc<Mutex<Option<Tensor>>>>) -> (Tensor, usize) {
        let table = Tensor::from_f64s(&[0.0; 8], &[4, 2], DType::F64)
            .unwrap()
            .requires_grad_()
            .unwrap();
        let idx = Tensor::from_vec(ids.to_vec(), &[ids.len()]).unwrap();
        let rows = table.index_select(0, &idx).unwrap();
        let storage = Arc::new(AtomicUsize::new(0));
        let loss = rows
            .sum()
            .unwrap()
            .detach()
            .recorded(&[&rows, &table], || TiedHead {
                rows: ids.len(),
                storage: storage.clone(),
                keep,
            });
        loss.backward().unwrap();
        let at = storage.load(Ordering::SeqCst);
        (table, at)
    }

    /// The lookup's backward adds its rows into the gradient the head gave the table, in that
    /// tensor's own memory: no zeros of the table's size and no add of two such tensors.
    #[test]
    fn a_lookup_adds_its_rows_onto_the_gradient_its_table_already_holds() {
        let (table, head_storage) = tied_lookup(&[1, 3, 1], None);
        let g = table.grad().unwrap();
        assert_eq!(
            g.to_vec_f64().unwrap(),
            [0.5, 0.5, 2.5, 2.5, 0.5, 0.5, 1.5, 1.5],
            "0.5 from the head, one per lookup of the row"
        );
        assert_eq!(
            Arc::as_ptr(g.storage_cell()) as usize,
            head_storage,
            "the table's gradient is the head's, added into"
        );
    }

    /// A gradient that something else still holds is not written: the sum is a new tensor.
    #[test]
    fn a_lookup_leaves_a_gradient_held_elsewhere_as_it_was() {
        let kept = Arc::new(Mutex::new(None));
        let (table, head_storage) = tied_lookup(&[1, 3, 1], Some(kept.clone()));
        let g = table.grad().unwrap();
        assert_eq!(
            g.to_vec_f64().unwrap(),
            [0.5, 0.5, 2.5, 2.5, 0.5, 0.5, 1.5, 1.5]
        );
        assert_ne!(Arc::as_ptr(g.storage_cell()) as usize, head_storage);
        let head = kept.lock().unwrap().take().unwrap();
        assert_eq!(head.to_vec_f64().unwrap(), [0.5; 8]);
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
