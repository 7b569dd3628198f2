//! The tensor handle: an `Arc` over storage, layout and autograd state. `Clone` is a refcount
//! bump, so scripts can copy tensors freely; views share storage.

mod create;
pub mod dispatch;
mod display;
mod host_reader;
mod inplace;
pub(crate) mod memory;

use crate::autograd::{is_grad_enabled, Backward, Edge, Node};
use crate::backend::{CpuStorage, Storage, StorageCell};
use crate::{DType, Device, Error, Layout, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLockReadGuard};

pub use create::TensorData;
pub use host_reader::HostReader;

#[derive(Clone)]
pub struct Tensor(Arc<TensorInner>);

pub(crate) struct TensorInner {
    storage: Arc<StorageCell>,
    layout: Layout,
    dtype: DType,
    grad_fn: Option<Arc<Node>>,
    /// Which of `grad_fn`'s outputs this is (0 unless the op returned several).
    output_index: usize,
    requires_grad: AtomicBool,
    grad: Mutex<Option<Tensor>>,
    /// A view taken of a parameter (or of such a view) while nothing recorded: a leaf that
    /// does not require grad, yet reads a parameter's storage (`Linear`'s Wᵀ at inference).
    /// Autocast's cast cache treats it as the parameter.
    views_parameter: bool,
}

impl Tensor {
    /// A new leaf over fresh storage with a contiguous layout of `shape`.
    pub fn from_storage(storage: Storage, shape: &[usize]) -> Result<Tensor> {
        // The strides multiply every dim but zeros, so `[0, 2^40, 2^40]` holds nothing yet
        // cannot be laid out; such shapes come from files, and are refused here for all readers.
        let span = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d.max(1)))
            .filter(|&s| s <= isize::MAX as usize);
        if span.is_none() {
            return Err(Error::invalid(
                "from_storage",
                format!("shape {shape:?} is too large to address"),
            ));
        }
        let numel: usize = shape.iter().product();
        if storage.len() != numel {
            return Err(Error::invalid(
                "from_storage",
                format!("{} elements do not fill shape {:?}", storage.len(), shape),
            ));
        }
        Ok(Self::leaf(
            Arc::new(StorageCell::new(storage)),
            Layout::contiguous(shape),
        ))
    }

    /// A new leaf over fresh storage seen through `layout` (a dense layout in some dim order,
    /// see `Layout::dense_like`); the storage must hold every element the layout reaches.
    pub(crate) fn from_storage_in(storage: Storage, layout: Layout) -> Result<Tensor> {
        if storage.len() < layout.storage_extent() {
            return Err(Error::invalid(
                "from_storage",
                format!(
                    "{} elements do not cover a layout reaching {}",
                    storage.len(),
                    layout.storage_extent()
                ),
            ));
        }
        Ok(Self::leaf(Arc::new(StorageCell::new(storage)), layout))
    }

    pub(crate) fn from_cpu(storage: CpuStorage, shape: &[usize]) -> Result<Tensor> {
        Self::from_storage(Storage::Cpu(storage), shape)
    }

    fn leaf(storage: Arc<StorageCell>, layout: Layout) -> Tensor {
        let dtype = storage.read().dtype();
        Tensor(Arc::new(TensorInner {
            storage,
            layout,
            dtype,
            grad_fn: None,
            output_index: 0,
            requires_grad: AtomicBool::new(false),
            grad: Mutex::new(None),
            views_parameter: false,
        }))
    }

    /// The result of an op: fresh contiguous storage, recorded in the graph when grad mode is on
    /// and an input requires grad. `make_backward` only runs in that case, so ops save nothing
    /// for inference.
    pub(crate) fn from_op<B: Backward + 'static>(
        storage: Storage,
        shape: &[usize],
        inputs: &[&Tensor],
        make_backward: impl FnOnce() -> B,
    ) -> Result<Tensor> {
        let out = Self::from_storage(storage, shape)?;
        Ok(out.recorded(inputs, make_backward))
    }

    /// A view of `self`'s storage with another layout, recorded like an op result.
    pub(crate) fn view_op<B: Backward + 'static>(
        &self,
        layout: Layout,
        make_backward: impl FnOnce() -> B,
    ) -> Tensor {
        let mut out = Self::leaf(self.0.storage.clone(), layout);
        if !is_grad_enabled() && self.is_leaf() && (self.requires_grad() || self.views_parameter())
        {
            Arc::get_mut(&mut out.0)
                .expect("a handle made here has one owner")
                .views_parameter = true;
        }
        out.recorded(&[self], make_backward)
    }

    /// Whether this is a view of a parameter's storage taken while nothing recorded.
    pub(crate) fn views_parameter(&self) -> bool {
        self.0.views_parameter
    }

    /// A view of `self`'s storage with another layout and no graph history (an op that
    /// records several views as one node, `split_with_sizes`, records them itself).
    pub(crate) fn detached_view(&self, layout: Layout) -> Tensor {
        Self::leaf(self.0.storage.clone(), layout)
    }

    pub(crate) fn recorded<B: Backward + 'static>(
        self,
        inputs: &[&Tensor],
        make_backward: impl FnOnce() -> B,
    ) -> Tensor {
        self.recorded_with_output(inputs, |_| make_backward())
    }

    /// Like `recorded`, for a backward that needs the op's own output (exp, tanh, sigmoid).
    pub(crate) fn recorded_with_output<B: Backward + 'static>(
        self,
        inputs: &[&Tensor],
        make_backward: impl FnOnce(&Tensor) -> B,
    ) -> Tensor {
        if !is_grad_enabled() || !inputs.iter().any(|t| t.requires_grad()) {
            return self;
        }
        let backward = make_backward(&self);
        let node = Arc::new(Self::node(inputs, 1, backward));
        self.with_node(node, 0)
    }

    /// The results of one op that returns several tensors, recorded as one node: its backward
    /// (`Backward::backward_outputs`) gets every output's gradient at once. A split into q, k
    /// and v sums nothing then, where a node per output would each pad its gradient to the
    /// whole input and add the three.
    pub(crate) fn recorded_outputs<B: Backward + 'static>(
        outputs: Vec<Tensor>,
        inputs: &[&Tensor],
        make_backward: impl FnOnce() -> B,
    ) -> Vec<Tensor> {
        if !is_grad_enabled() || !inputs.iter().any(|t| t.requires_grad()) {
            return outputs;
        }
        let node = Arc::new(Self::node(inputs, outputs.len(), make_backward()));
        outputs
            .into_iter()
            .enumerate()
            .map(|(i, t)| t.with_node(node.clone(), i))
            .collect()
    }

    fn node<B: Backward + 'static>(inputs: &[&Tensor], outputs: usize, backward: B) -> Node {
        Node {
            name: backward.name(),
            outputs,
            inputs: inputs
                .iter()
                .map(|t| t.requires_grad().then(|| Edge::to(t)))
                .collect(),
            backward: Mutex::new(Some(Box::new(backward))),
        }
    }

    /// This tensor as output `index` of `node`.
    fn with_node(self, node: Arc<Node>, index: usize) -> Tensor {
        // The handle may be shared (an op can return a clone of what it saved); then the
        // recorded result is a new handle over the same storage and layout.
        let mut inner = match Arc::try_unwrap(self.0) {
            Ok(inner) => inner,
            Err(shared) => {
                let fresh = Self::leaf(shared.storage.clone(), shared.layout.clone());
                Arc::into_inner(fresh.0).expect("a handle made here has one owner")
            }
        };
        inner.grad_fn = Some(node);
        inner.output_index = index;
        inner.requires_grad = AtomicBool::new(true);
        Tensor(Arc::new(inner))
    }

    /// Which output of its op this tensor is (0 for a leaf or a one-output op).
    pub(crate) fn output_index(&self) -> usize {
        self.0.output_index
    }

    // ----- accessors -----

    pub fn shape(&self) -> &[usize] {
        self.0.layout.shape()
    }

    pub fn dims(&self) -> &[usize] {
        self.shape()
    }

    pub fn rank(&self) -> usize {
        self.0.layout.rank()
    }

    pub fn numel(&self) -> usize {
        self.0.layout.numel()
    }

    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// Where the data lives; read from the storage, which `relocate_` can move.
    pub fn device(&self) -> Device {
        self.0.storage.device()
    }

    pub fn layout(&self) -> &Layout {
        &self.0.layout
    }

    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }

    /// A stable identity while the tensor is alive (the handle's address).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// Whether two tensors are views of one storage.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0.storage, &other.0.storage)
    }

    /// Whether this handle is the only one to its data: no clone of it and no other view of
    /// its storage, so writing into it in place changes nothing anyone else can read.
    pub(crate) fn is_sole_owner(&self) -> bool {
        Arc::strong_count(&self.0) == 1 && Arc::strong_count(&self.0.storage) == 1
    }

    /// The device address of the first element (0 on the CPU): what a kernel captured into a
    /// CUDA graph reads, so a replay is only valid while it stays the same.
    pub fn data_address(&self) -> u64 {
        match &*self.storage() {
            Storage::Cuda(s) => s.ptr_at(self.layout().offset()),
            Storage::Cpu(_) => 0,
        }
    }

    pub fn storage(&self) -> RwLockReadGuard<'_, Storage> {
        self.0.storage.read()
    }

    pub(crate) fn storage_cell(&self) -> &Arc<StorageCell> {
        &self.0.storage
    }

    pub fn storage_version(&self) -> u64 {
        self.0.storage.version()
    }

    // ----- autograd state -----

    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad.load(Ordering::Relaxed)
    }

    /// Marks a leaf as a parameter whose gradient backward should fill.
    pub fn set_requires_grad(&self, on: bool) -> Result<&Tensor> {
        if self.0.grad_fn.is_some() {
            return Err(Error::invalid(
                "requires_grad",
                "only leaf tensors can change requires_grad; use detach() for a non-leaf",
            ));
        }
        if on && !self.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: "requires_grad",
                dtype: self.dtype(),
                detail: ": only float tensors can require grad".into(),
            });
        }
        self.0.requires_grad.store(on, Ordering::Relaxed);
        Ok(self)
    }

    /// Builder form of `set_requires_grad(true)`.
    pub fn requires_grad_(self) -> Result<Tensor> {
        self.set_requires_grad(true)?;
        Ok(self)
    }

    pub fn is_leaf(&self) -> bool {
        self.0.grad_fn.is_none()
    }

    pub fn grad_fn(&self) -> Option<&Arc<Node>> {
        self.0.grad_fn.as_ref()
    }

    /// The gradient accumulated by backward, for leaves that require grad.
    pub fn grad(&self) -> Option<Tensor> {
        self.0
            .grad
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_grad(&self, grad: Option<Tensor>) {
        *self.0.grad.lock().unwrap_or_else(|e| e.into_inner()) = grad;
    }

    pub fn zero_grad(&self) {
        self.set_grad(None);
    }

    pub(crate) fn accumulate_grad(&self, g: &Tensor) -> Result<()> {
        let mut slot = self.0.grad.lock().unwrap_or_else(|e| e.into_inner());
        let g = g.detach();
        *slot = Some(match slot.take() {
            // A fresh sum, not an in-place add: the caller may still hold the previous grad.
            Some(prev) => prev.add(&g)?,
            None => g,
        });
        Ok(())
    }

    /// Moves this leaf's storage to `device` in place, so every handle to it (a model's
    /// parameter, an optimizer's reference) sees the new device. Its gradient is cleared.
    pub fn relocate_(&self, device: Device) -> Result<()> {
        if self.device() == device {
            return Ok(());
        }
        if !self.is_leaf() {
            return Err(Error::invalid(
                "relocate_",
                "only leaf tensors (parameters, buffers) move in place; use to_device() for a copy",
            ));
        }
        let whole = self.is_contiguous()
            && self.layout().offset() == 0
            && self.storage().len() == self.numel();
        if !whole {
            return Err(Error::invalid("relocate_", format!("a view of shape {:?} does not own its whole storage; move the tensor it views, or use to_device()", self.shape())));
        }
        let moved = crate::autograd::no_grad(|| self.transfer(device))?;
        *self.0.storage.write() = moved;
        self.0.storage.set_device(device);
        self.set_grad(None);
        Ok(())
    }

    /// The same data with no graph history.
    pub fn detach(&self) -> Tensor {
        Self::leaf(self.0.storage.clone(), self.0.layout.clone())
    }
}

impl Drop for TensorInner {
    /// Frees the graph behind this tensor with an explicit stack: a chain of 100k ops would
    /// overflow the call stack if each node dropped the next recursively.
    fn drop(&mut self) {
        let Some(first) = self.grad_fn.take() else {
            return;
        };
        let mut stack = vec![first];
        while let Some(node) = stack.pop() {
            let Some(mut node) = Arc::into_inner(node) else {
                continue;
            };
            node.backward
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            for input in node.inputs.drain(..).flatten() {
                if let Edge::Op { node, .. } = input {
                    stack.push(node);
                }
            }
        }
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor(shape={:?}, dtype={}, device={})",
            self.shape(),
            self.dtype(),
            self.device()
        )
    }
}
