//! A graph node: the op's backward closure with what it saved, and the inputs that need grads.

use crate::{Error, Result, Tensor};
use std::sync::Mutex;

/// One op's backward. It runs with grad recording off and returns one gradient per input
/// (`None` where `needs[i]` is false or the input gets no gradient).
pub trait Backward: Send + Sync {
    fn name(&self) -> &'static str;
    fn backward(&self, grad: &Tensor, needs: &[bool]) -> Result<Vec<Option<Tensor>>>;
}

pub struct Node {
    pub(crate) name: &'static str,
    /// One entry per op input; `None` for inputs that do not require grad.
    pub(crate) inputs: Vec<Option<Tensor>>,
    /// Taken (and so freed, with everything it saved) by a backward that does not retain the graph.
    pub(crate) backward: Mutex<Option<Box<dyn Backward>>>,
}

impl Node {
    pub fn name(&self) -> &'static str {
        self.name
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
