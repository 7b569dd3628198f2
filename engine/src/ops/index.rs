//! cat, stack, index_select, gather, scatter_add and index_copy_. Index tensors hold integers; every index is
//! checked against its dimension, so a bad index is an error rather than a wild read.

use super::dispatch::{cuda_kernel_into, dispatch, dispatch_all, dispatch_mut, CpuOperand};
use super::{backward_fn, grad_if};
use crate::autograd::{Backward, SavedTensor};
use crate::backend::cpu::index as cpu;
use crate::backend::{cuda, CpuStorage, CudaStorage, Storage};
use crate::layout::resolve_dim;
use crate::tensor::memory::check_alloc;
use crate::{DType, Device, Error, Layout, Result, Tensor};

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

/// The indices of an integer view on the CPU, checked to lie in 0..size. CUDA kernels check
/// their indices on the device instead, so a CUDA op never waits on a host read.
fn checked_indices(op: &'static str, (s, l): CpuOperand<'_>, size: usize) -> Result<Vec<usize>> {
    cpu::indices(s, l)
        .ok_or_else(|| Error::UnsupportedDType {
            op,
            dtype: s.dtype(),
            detail: ": indices must be integers".into(),
        })?
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

/// zeros(`shape`) with `src` added at `indices` along `d`: index_select's backward.
fn index_add(shape: &[usize], d: usize, indices: &Tensor, src: &Tensor) -> Result<Tensor> {
    const OP: &str = "index_select";
    let src = src.contiguous()?;
    let storage = dispatch(
        OP,
        [indices, &src],
        |[i, (s, _)]| {
            let idx = checked_indices(OP, i, shape[d])?;
            let base = CpuStorage::full(0.0, shape.iter().product(), src.dtype());
            Ok(cpu::index_add(&base, shape, d, &idx, s).into())
        },
        |[(i, li), (s, ls)]| Ok(cuda::index::index_add(shape, d, i, li, s, ls)?.into()),
    )?;
    Tensor::from_storage(storage, shape)
}

/// `onto` with `src` added at `indices` along `d`: index_select's backward onto a gradient that
/// already holds another use's sum (`Backward::backward_onto`; `onto` is held by nothing else).
/// The rows go into `onto` itself where the kernels accumulate in its dtype (F32, F64), else
/// into zeros that are then added to it.
fn index_add_onto(onto: Tensor, d: usize, indices: &Tensor, src: &Tensor) -> Result<Tensor> {
    const OP: &str = "index_select";
    let src = src.contiguous()?;
    let in_place = onto.is_contiguous()
        && onto.layout().offset() == 0
        && onto.dtype() == src.dtype()
        && (onto.device() == Device::Cpu || cuda::index::adds_in_place(onto.dtype()));
    if !in_place {
        return onto.add(&index_add(onto.shape(), d, indices, &src)?);
    }
    let size = onto.shape()[d];
    let shape = onto.shape().to_vec();
    dispatch_mut(
        OP,
        &onto,
        [indices, &src],
        |(t, _), [i, (r, _)]| {
            let idx = checked_indices(OP, i, size)?;
            *t = cpu::index_add(t, &shape, d, &idx, r);
            Ok(())
        },
        |(t, tl), [(i, il), (r, rl)]| cuda::index::index_add_into(t, tl, d, i, il, r, rl),
    )?;
    Ok(onto)
}

/// index_select's backward: the output's gradient added at the indices, into zeros of the
/// input's shape, or onto the sum the input's gradient already holds (an embedding tied to
/// the head gets the head's first, and its lookup adds its rows into that).
struct IndexSelectBackward {
    in_shape: Vec<usize>,
    dim: usize,
    indices: SavedTensor,
}

impl Backward for IndexSelectBackward {
    fn name(&self) -> &'static str {
        "index_select"
    }

    fn backward(&self, grad: &Tensor, _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let rows = index_add(&self.in_shape, self.dim, self.indices.get()?, grad)?;
        Ok(vec![Some(rows)])
    }

    fn adds_onto(&self) -> bool {
        true
    }

    fn backward_onto(
        &self,
        grads: &[Option<Tensor>],
        needs: &[bool],
        sums: &mut [Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        match (grads, sums) {
            ([Some(grad)], [sum @ Some(_)]) => {
                let onto = sum.take().expect("matched Some");
                let total = index_add_onto(onto, self.dim, self.indices.get()?, grad)?;
                Ok(vec![Some(total)])
            }
            _ => self.backward_outputs(grads, needs),
        }
    }
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
        check_alloc("cat", &shape, dtype, first.device())?;
        let (storage, layout) = cat_storage(&parts, &shape, d, dtype)?;
        let sizes: Vec<usize> = parts.iter().map(|t| t.shape()[d]).collect();
        let refs: Vec<&Tensor> = parts.iter().collect();
        Ok(
            Tensor::from_storage_in(storage, layout)?.recorded(&refs, move || {
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
            }),
        )
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
        let size = self.shape()[d];
        let mut shape = self.shape().to_vec();
        shape[d] = indices.numel();
        check_alloc("index_select", &shape, self.dtype(), self.device())?;
        let storage = dispatch(
            "index_select",
            [self, indices],
            |[(s, l), i]| {
                let idx = checked_indices("index_select", i, size)?;
                Ok(cpu::index_select(s, l, d, &idx).into())
            },
            |[(x, lx), (i, li)]| Ok(cuda::index::index_select(x, lx, d, i, li)?.into()),
        )?;
        let in_shape = self.shape().to_vec();
        Tensor::from_op(storage, &shape, &[self], || IndexSelectBackward {
            in_shape,
            dim: d,
            indices: SavedTensor::new("index_select", indices),
        })
    }

    /// out[i][j] = self[index[i][j]][j] for dim 0, and likewise for other dims (torch.gather).
    pub fn gather(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        let d = resolve_dim("gather", dim, self.rank())?;
        check_index_shape("gather", self.shape(), index.shape(), d)?;
        check_index_dtype("gather", index)?;
        self.check_same_device("gather", index)?;
        let idx_shape = index.shape().to_vec();
        let size = self.shape()[d];
        let storage = dispatch(
            "gather",
            [self, index],
            |[(s, l), i]| {
                let idx = checked_indices("gather", i, size)?;
                Ok(cpu::gather(s, l, d, &idx, &idx_shape).into())
            },
            |[(x, lx), (i, li)]| Ok(cuda::index::gather(x, lx, d, i, li)?.into()),
        )?;
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
        // The CPU kernel reads whole contiguous buffers; the CUDA one takes any view.
        let (base, s) = match self.device() {
            Device::Cpu => (self.contiguous()?, src.contiguous()?),
            Device::Cuda(_) => (self.clone(), src.clone()),
        };
        let (size, idx_shape) = (self.shape()[d], index.shape().to_vec());
        let storage = dispatch(
            "scatter_add",
            [&base, index, &s],
            |[(b, _), i, (ss, _)]| {
                let idx = checked_indices("scatter_add", i, size)?;
                Ok(cpu::scatter_add(b, &shape, d, &idx, &idx_shape, ss).into())
            },
            |[(b, lb), (i, li), (ss, ls)]| {
                Ok(cuda::index::scatter_add(b, lb, d, i, li, ss, ls)?.into())
            },
        )?;
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

/// In place: `self[.., index[j], ..] = src[.., j, ..]` along `dim` (torch's index_copy_).
/// `index` is 0-d or 1-D with one entry per slice of `src` along `dim`; `src` has self's shape
/// elsewhere and is cast to self's dtype. On CUDA the kernel reads the index itself, so a
/// position kept in device memory (a KV cache's write cursor) needs no host read.
impl Tensor {
    pub fn index_copy_(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<()> {
        const OP: &str = "index_copy_";
        self.check_inplace(OP)?;
        let d = resolve_dim(OP, dim, self.rank())?;
        check_index_dtype(OP, index)?;
        self.check_same_device(OP, index)?;
        self.check_same_device(OP, src)?;
        let count = index.numel();
        let mut want = self.shape().to_vec();
        want[d] = count;
        if index.rank() > 1 || src.shape() != want.as_slice() {
            return Err(Error::invalid(
                OP,
                format!(
                    "writing {count} slice(s) (index of shape {:?}) along dim {d} of a tensor of shape {:?} needs a source of shape {want:?}, got {:?}",
                    index.shape(),
                    self.shape(),
                    src.shape()
                ),
            ));
        }
        if self
            .layout()
            .strides()
            .iter()
            .zip(self.shape())
            .any(|(&s, &n)| s == 0 && n > 1)
        {
            return Err(Error::invalid(
                OP,
                "cannot write into a broadcast view; write into a contiguous copy",
            ));
        }
        // The write lock must not wait on a read of the same storage: an aliasing operand is
        // copied first.
        let own = |t: &Tensor| -> Result<Tensor> {
            if std::sync::Arc::ptr_eq(self.storage_cell(), t.storage_cell()) {
                t.contiguous_copy()
            } else {
                Ok(t.clone())
            }
        };
        let (src, index) = crate::autograd::no_grad(|| {
            Ok::<_, Error>((own(&src.to_dtype(self.dtype())?)?, own(index)?))
        })?;
        let index = &index;
        match self.device() {
            Device::Cpu => {
                let size = self.shape()[d];
                let guard = index.storage();
                let rows = match &*guard {
                    Storage::Cpu(s) => checked_indices(OP, (s, index.layout()), size)?,
                    Storage::Cuda(_) => unreachable!("devices were checked equal"),
                };
                drop(guard);
                let _no_grad = crate::autograd::NoGradGuard::new();
                for (j, &row) in rows.iter().enumerate() {
                    self.narrow(d as isize, row, 1)?
                        .copy_(&src.narrow(d as isize, j, 1)?)?;
                }
                Ok(())
            }
            Device::Cuda(_) => cuda_kernel_into(OP, [self], [index, &src], |[(y, yl)], [i, x]| {
                cuda::index::index_copy(y, yl, d, i.0, i.1, x.0, x.1)
            }),
        }
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
/// The dims of a dense layout from outermost to innermost.
fn dim_order(l: &Layout) -> Vec<usize> {
    let strides = l.dense_like().strides().to_vec();
    let mut order: Vec<usize> = (0..l.rank()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(strides[i]));
    order
}

/// The result of `cat` and its layout. On CUDA, parts laid out densely in one dim order other
/// than row-major (channels-last images) give a result in that order, so the next kernels read
/// it without a transpose; everything else gives a row-major result.
/// `tensors` side by side along dim 0 in `dtype`, each cast as it is copied (one pass over
/// each, no intermediate copy); not recorded. Autocast's operand of several weights in one
/// product (`linears_joined`).
pub(crate) fn cat_rows_as(tensors: &[&Tensor], dtype: DType) -> Result<Tensor> {
    let first = tensors
        .first()
        .ok_or_else(|| Error::invalid("cat", "needs at least one tensor"))?;
    let mut shape = first.shape().to_vec();
    shape[0] = tensors.iter().map(|t| t.shape()[0]).sum();
    check_alloc("cat", &shape, dtype, first.device())?;
    let parts: Vec<Tensor> = tensors.iter().map(|&t| t.clone()).collect();
    let (storage, layout) = cat_storage(&parts, &shape, 0, dtype)?;
    Tensor::from_storage_in(storage, layout)
}

/// The parts side by side along `d` in `dtype` (on CUDA each part is cast as it is copied; the
/// CPU casts the joined result).
fn cat_storage(
    parts: &[Tensor],
    shape: &[usize],
    d: usize,
    dtype: DType,
) -> Result<(Storage, Layout)> {
    let refs: Vec<&Tensor> = parts.iter().collect();
    let row_major = Layout::contiguous(shape);
    let first = parts[0].layout();
    let order = dim_order(first);
    let permuted = first.is_dense()
        && !first.is_contiguous()
        && parts
            .iter()
            .all(|p| p.layout().is_dense() && dim_order(p.layout()) == order);
    let cuda_layout = if permuted {
        Layout::new(shape.to_vec(), first.strides().to_vec(), 0).dense_like()
    } else {
        row_major.clone()
    };
    let mut layout = row_major;
    let storage = dispatch_all(
        "cat",
        &refs,
        |views| {
            let joined = cpu::cat(views, d);
            Ok(match joined.dtype() == dtype {
                true => joined,
                false => {
                    let l = Layout::contiguous(shape);
                    crate::backend::cpu::elementwise::cast(&joined, &l, dtype)
                }
            }
            .into())
        },
        |views| {
            let Some(&(first, _)) = views.first() else {
                return Err(Error::invalid("cat", "needs at least one tensor"));
            };
            let out = CudaStorage::alloc(first.cuda_device(), shape.iter().product(), dtype)?;
            let mut start = 0;
            for &(s, l) in views {
                let len = l.shape()[d];
                cuda::copy::copy_view(s, l, &out, &cuda_layout.narrowed(d, start, len))?;
                start += len;
            }
            layout = cuda_layout.clone();
            Ok(out.into())
        },
    )?;
    Ok((storage, layout))
}
