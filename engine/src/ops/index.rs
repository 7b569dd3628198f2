//! cat, stack, index_select, gather and scatter_add. Index tensors hold integers; every index is
//! checked against its dimension, so a bad index is an error rather than a wild read.

use super::{backward_fn, grad_if};
use crate::autograd::SavedTensor;
use crate::backend::cpu::index as cpu;
use crate::backend::{cuda, CudaStorage, Storage};
use crate::layout::resolve_dim;
use crate::{Device, Error, Layout, Result, Tensor};

/// Index tensors hold integers (Bool and floats are refused before any kernel runs).
fn check_index_dtype(op: &'static str, idx: &Tensor) -> Result<()> {
    if idx.dtype().is_float() || idx.dtype() == crate::DType::Bool {
        return Err(Error::UnsupportedDType {
            op,
            dtype: idx.dtype(),
            detail: ": indices must be integers".into(),
        });
    }
    Ok(())
}

/// The indices of an integer CPU tensor, checked to lie in 0..size. CUDA kernels check their
/// indices on the device instead, so a CUDA op never waits on a host read.
fn checked_indices(op: &'static str, idx: &Tensor, size: usize) -> Result<Vec<usize>> {
    check_index_dtype(op, idx)?;
    idx.to_vec::<i64>()?
        .into_iter()
        .map(|i| {
            if i >= 0 && (i as usize) < size {
                Ok(i as usize)
            } else {
                Err(Error::IndexOutOfRange { op, index: i, size })
            }
        })
        .collect()
}

/// The device storage under a CUDA tensor's read guard.
pub(super) fn cuda_of<'a>(op: &'static str, t: &Tensor, s: &'a Storage) -> Result<&'a CudaStorage> {
    match s {
        Storage::Cuda(c) => Ok(c),
        Storage::Cpu(_) => Err(Error::invalid(
            op,
            format!("expected a CUDA tensor, got one on {:?}", t.device()),
        )),
    }
}

/// zeros(`shape`) with `src` added at `indices` along `d`: index_select's backward.
fn index_add(shape: &[usize], d: usize, indices: &Tensor, src: &Tensor) -> Result<Tensor> {
    const OP: &str = "index_select";
    indices.check_same_device(OP, src)?;
    let storage = match src.device() {
        Device::Cpu => {
            let idx = checked_indices(OP, indices, shape[d])?;
            let base = Tensor::zeros(shape, src.dtype(), Device::Cpu)?;
            let src = src.contiguous()?;
            base.with_cpu(OP, |b, _| {
                src.with_cpu(OP, |s, _| {
                    Storage::Cpu(cpu::index_add(b, shape, d, &idx, s))
                })
            })??
        }
        Device::Cuda(_) => {
            let (gi, gs) = (indices.storage(), src.storage());
            let (i, s) = (cuda_of(OP, indices, &gi)?, cuda_of(OP, src, &gs)?);
            Storage::Cuda(cuda::index::index_add(
                shape,
                d,
                i,
                indices.layout(),
                s,
                src.layout(),
            )?)
        }
    };
    Tensor::from_storage(storage, shape)
}

impl Tensor {
    /// Concatenates along `dim`; every other dim must match.
    pub fn cat(tensors: &[Tensor], dim: isize) -> Result<Tensor> {
        let first = tensors
            .first()
            .ok_or_else(|| Error::invalid("cat", "needs at least one tensor"))?;
        let d = resolve_dim("cat", dim, first.rank())?;
        let dtype = tensors
            .iter()
            .fold(first.dtype(), |acc, t| acc.promote(t.dtype()));
        let mut parts = Vec::with_capacity(tensors.len());
        for t in tensors {
            first.check_same_device("cat", t)?;
            let same_rest = t.rank() == first.rank()
                && (0..t.rank()).all(|i| i == d || t.shape()[i] == first.shape()[i]);
            if !same_rest {
                return Err(Error::ShapeMismatch {
                    op: "cat",
                    lhs: first.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
            parts.push(t.to_dtype(dtype)?);
        }
        let mut shape = first.shape().to_vec();
        shape[d] = parts.iter().map(|t| t.shape()[d]).sum();
        let storage = cat_storage(&parts, &shape, d)?;
        let sizes: Vec<usize> = parts.iter().map(|t| t.shape()[d]).collect();
        let refs: Vec<&Tensor> = parts.iter().collect();
        Tensor::from_op(storage, &shape, &refs, move || {
            backward_fn("cat", move |g, needs| {
                let mut start = 0;
                let mut out = Vec::with_capacity(sizes.len());
                for (&len, &need) in sizes.iter().zip(needs) {
                    out.push(grad_if(need, || {
                        g.narrow(d as isize, start, len)?.contiguous()
                    })?);
                    start += len;
                }
                Ok(out)
            })
        })
    }

    /// Stacks equal-shaped tensors along a new dim.
    pub fn stack(tensors: &[Tensor], dim: isize) -> Result<Tensor> {
        let first = tensors
            .first()
            .ok_or_else(|| Error::invalid("stack", "needs at least one tensor"))?;
        let d = resolve_dim("stack", dim, first.rank() + 1)?;
        for t in tensors {
            if t.shape() != first.shape() {
                return Err(Error::ShapeMismatch {
                    op: "stack",
                    lhs: first.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
        }
        let expanded: Vec<Tensor> = tensors
            .iter()
            .map(|t| t.unsqueeze(d as isize))
            .collect::<Result<_>>()?;
        Tensor::cat(&expanded, d as isize)
    }

    /// Picks entries `indices` (1-D integers) along `dim`.
    pub fn index_select(&self, dim: isize, indices: &Tensor) -> Result<Tensor> {
        let d = resolve_dim("index_select", dim, self.rank())?;
        if indices.rank() > 1 {
            return Err(Error::invalid(
                "index_select",
                format!("indices must be 1-D, got shape {:?}", indices.shape()),
            ));
        }
        check_index_dtype("index_select", indices)?;
        self.check_same_device("index_select", indices)?;
        let storage = match self.device() {
            Device::Cpu => {
                let idx = checked_indices("index_select", indices, self.shape()[d])?;
                self.with_cpu("index_select", |s, l| {
                    Storage::Cpu(cpu::index_select(s, l, d, &idx))
                })?
            }
            Device::Cuda(_) => {
                let (gx, gi) = (self.storage(), indices.storage());
                let (x, i) = (
                    cuda_of("index_select", self, &gx)?,
                    cuda_of("index_select", indices, &gi)?,
                );
                Storage::Cuda(cuda::index::index_select(
                    x,
                    self.layout(),
                    d,
                    i,
                    indices.layout(),
                )?)
            }
        };
        let mut shape = self.shape().to_vec();
        shape[d] = indices.numel();
        let in_shape = self.shape().to_vec();
        Tensor::from_op(storage, &shape, &[self], || {
            let indices = SavedTensor::new("index_select", indices);
            backward_fn("index_select", move |g, _| {
                Ok(vec![Some(index_add(&in_shape, d, indices.get()?, g)?)])
            })
        })
    }

    /// out[i][j] = self[index[i][j]][j] for dim 0, and likewise for other dims (torch.gather).
    pub fn gather(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        let d = resolve_dim("gather", dim, self.rank())?;
        check_index_shape("gather", self.shape(), index.shape(), d)?;
        check_index_dtype("gather", index)?;
        self.check_same_device("gather", index)?;
        let idx_shape = index.shape().to_vec();
        let storage = match self.device() {
            Device::Cpu => {
                let idx = checked_indices("gather", index, self.shape()[d])?;
                self.with_cpu("gather", |s, l| {
                    Storage::Cpu(cpu::gather(s, l, d, &idx, &idx_shape))
                })?
            }
            Device::Cuda(_) => {
                let (gx, gi) = (self.storage(), index.storage());
                let (x, i) = (
                    cuda_of("gather", self, &gx)?,
                    cuda_of("gather", index, &gi)?,
                );
                Storage::Cuda(cuda::index::gather(x, self.layout(), d, i, index.layout())?)
            }
        };
        let in_shape = self.shape().to_vec();
        Tensor::from_op(storage, &idx_shape, &[self], || {
            let index = SavedTensor::new("gather", index);
            backward_fn("gather", move |g, _| {
                let base = Tensor::zeros(&in_shape, g.dtype(), g.device())?;
                Ok(vec![Some(base.scatter_add(d as isize, index.get()?, g)?)])
            })
        })
    }

    /// A copy of self with `src` added at the positions `index` names along `dim`.
    pub fn scatter_add(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        let d = resolve_dim("scatter_add", dim, self.rank())?;
        if index.shape() != src.shape() {
            return Err(Error::ShapeMismatch {
                op: "scatter_add",
                lhs: index.shape().to_vec(),
                rhs: src.shape().to_vec(),
            });
        }
        check_index_shape("scatter_add", self.shape(), index.shape(), d)?;
        check_index_dtype("scatter_add", index)?;
        self.check_same_device("scatter_add", index)?;
        self.check_same_device("scatter_add", src)?;
        let src = src.to_dtype(self.dtype())?;
        let shape = self.shape().to_vec();
        let storage = match self.device() {
            Device::Cpu => {
                let idx = checked_indices("scatter_add", index, self.shape()[d])?;
                let (base, s) = (self.contiguous()?, src.contiguous()?);
                let idx_shape = index.shape().to_vec();
                base.with_cpu("scatter_add", |b, _| {
                    s.with_cpu("scatter_add", |ss, _| {
                        Storage::Cpu(cpu::scatter_add(b, &shape, d, &idx, &idx_shape, ss))
                    })
                })??
            }
            Device::Cuda(_) => {
                let (gb, gi, gs) = (self.storage(), index.storage(), src.storage());
                Storage::Cuda(cuda::index::scatter_add(
                    cuda_of("scatter_add", self, &gb)?,
                    self.layout(),
                    d,
                    cuda_of("scatter_add", index, &gi)?,
                    index.layout(),
                    cuda_of("scatter_add", &src, &gs)?,
                    src.layout(),
                )?)
            }
        };
        Tensor::from_op(storage, &shape, &[self, &src], || {
            let index = SavedTensor::new("scatter_add", index);
            backward_fn("scatter_add", move |g, needs| {
                Ok(vec![
                    grad_if(needs[0], || Ok(g.clone()))?,
                    grad_if(needs[1], || g.gather(d as isize, index.get()?))?,
                ])
            })
        })
    }
}

/// gather/scatter need an index of the same rank, no larger than self outside `dim`.
fn check_index_shape(op: &'static str, shape: &[usize], idx: &[usize], dim: usize) -> Result<()> {
    let ok = idx.len() == shape.len() && (0..shape.len()).all(|i| i == dim || idx[i] <= shape[i]);
    if ok {
        Ok(())
    } else {
        Err(Error::ShapeMismatch {
            op,
            lhs: shape.to_vec(),
            rhs: idx.to_vec(),
        })
    }
}

/// The storage of `parts` joined along `d` into `shape` (all on one device, one dtype).
fn cat_storage(parts: &[Tensor], shape: &[usize], d: usize) -> Result<Storage> {
    let guards: Vec<_> = parts.iter().map(|t| t.storage()).collect();
    if let Device::Cuda(i) = parts[0].device() {
        let dev = cuda::device(i)?;
        let out = CudaStorage::alloc(&dev, shape.iter().product(), parts[0].dtype())?;
        let full = Layout::contiguous(shape);
        let mut start = 0;
        for (g, t) in guards.iter().zip(parts) {
            if let Storage::Cuda(s) = &**g {
                let len = t.shape()[d];
                cuda::copy::copy_view(s, t.layout(), &out, &full.narrowed(d, start, len))?;
                start += len;
            }
        }
        return Ok(Storage::Cuda(out));
    }
    let views: Vec<_> = guards
        .iter()
        .zip(parts)
        .filter_map(|(g, t)| match &**g {
            Storage::Cpu(s) => Some((s, t.layout())),
            Storage::Cuda(_) => None,
        })
        .collect();
    Ok(Storage::Cpu(cpu::cat(&views, d)))
}
