//! Views (reshape, permute, narrow, expand, squeeze) share storage and only change the layout;
//! `contiguous`, `to_dtype` and `to_device` copy. Each records the backward that undoes it.

use super::dispatch::dispatch;
use super::{backward_fn, grad_if};
use crate::autograd::Backward;
use crate::backend::cpu::elementwise;
use crate::backend::{cuda, CudaStorage, Storage};
use crate::layout::resolve_dim;
use crate::tensor::memory::check_alloc;
use crate::{DType, Device, Error, Layout, Result, Tensor};
use std::sync::Arc;

/// Resolves a shape that may hold one -1 against `numel`.
pub fn infer_shape(op: &'static str, numel: usize, shape: &[isize]) -> Result<Vec<usize>> {
    let mut infer = None;
    let mut known = 1usize;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if infer.is_none() => infer = Some(i),
            -1 => {
                return Err(Error::invalid(
                    op,
                    format!("only one dimension can be -1, got {shape:?}"),
                ))
            }
            d if d < 0 => {
                return Err(Error::invalid(
                    op,
                    format!("invalid dimension {d} in {shape:?}"),
                ))
            }
            d => {
                known = known
                    .checked_mul(d as usize)
                    .ok_or_else(|| Error::invalid(op, "shape overflows"))?
            }
        }
    }
    let mut out: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(Error::invalid(
                op,
                format!("cannot infer -1 in {shape:?} for {numel} elements"),
            ));
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(Error::invalid(
            op,
            format!("shape {shape:?} is invalid for {numel} elements"),
        ));
    }
    Ok(out)
}

impl Tensor {
    /// A contiguous copy when needed (recorded as an identity for autograd).
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        // An expanded view may stand for far more elements than its storage holds.
        check_alloc("contiguous", self.shape(), self.dtype(), self.device())?;
        let storage = dispatch(
            "contiguous",
            [self],
            |[(s, l)]| Ok(elementwise::cast(s, l, s.dtype()).into()),
            |[(s, l)]| Ok(cuda::copy::cast(s, l, s.dtype())?.into()),
        )?;
        Tensor::from_op(storage, self.shape(), &[self], || {
            backward_fn("contiguous", |g, _| Ok(vec![Some(g.clone())]))
        })
    }

    /// Reshape with PyTorch semantics: one dim may be -1; copies only when the view is not contiguous.
    pub fn reshape(&self, shape: &[isize]) -> Result<Tensor> {
        let shape = infer_shape("reshape", self.numel(), shape)?;
        self.reshape_to(&shape)
    }

    pub fn reshape_to(&self, shape: &[usize]) -> Result<Tensor> {
        // Checked: sizes from a file or a script can overflow a product that wraps to numel.
        let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if count != Some(self.numel()) {
            return Err(Error::ShapeMismatch {
                op: "reshape",
                lhs: self.shape().to_vec(),
                rhs: shape.to_vec(),
            });
        }
        if shape == self.shape() {
            return Ok(self.clone());
        }
        let src = self.contiguous()?;
        let layout = src
            .layout()
            .reshaped(shape)
            .ok_or_else(|| Error::ShapeMismatch {
                op: "reshape",
                lhs: self.shape().to_vec(),
                rhs: shape.to_vec(),
            })?;
        let in_shape = self.shape().to_vec();
        Ok(src.view_op(layout, move || {
            backward_fn("reshape", move |g, _| {
                Ok(vec![Some(g.reshape_to(&in_shape)?)])
            })
        }))
    }

    /// Dim `dim` split into dims of `sizes` (whose product must be its size), always as a
    /// view: a projection's [B, T, heads * hd] columns seen as [B, T, heads, hd] stay in place
    /// even when they are one part of a fused q/k/v product's rows, where `reshape_to` would
    /// copy a non-contiguous input.
    pub(crate) fn unflatten(&self, dim: isize, sizes: &[usize]) -> Result<Tensor> {
        let d = resolve_dim("unflatten", dim, self.rank())?;
        if sizes.iter().product::<usize>() != self.shape()[d] {
            return Err(Error::invalid(
                "unflatten",
                format!(
                    "sizes {sizes:?} do not multiply to {} (dim {d})",
                    self.shape()[d]
                ),
            ));
        }
        let l = self.layout();
        let mut shape = l.shape()[..d].to_vec();
        let mut strides = l.strides()[..d].to_vec();
        let mut step = l.strides()[d];
        let mut inner: Vec<usize> = sizes
            .iter()
            .rev()
            .map(|&n| {
                let s = step;
                step *= n;
                s
            })
            .collect();
        inner.reverse();
        shape.extend_from_slice(sizes);
        strides.extend(inner);
        shape.extend_from_slice(&l.shape()[d + 1..]);
        strides.extend_from_slice(&l.strides()[d + 1..]);
        let in_shape = self.shape().to_vec();
        Ok(
            self.view_op(Layout::new(shape, strides, l.offset()), move || {
                backward_fn("unflatten", move |g, _| {
                    Ok(vec![Some(g.reshape_to(&in_shape)?)])
                })
            }),
        )
    }

    pub fn flatten(&self) -> Result<Tensor> {
        self.reshape_to(&[self.numel()])
    }

    pub fn permute(&self, dims: &[isize]) -> Result<Tensor> {
        let rank = self.rank();
        if dims.len() != rank {
            return Err(Error::invalid(
                "permute",
                format!("got {} dims for a tensor of rank {rank}", dims.len()),
            ));
        }
        let perm: Vec<usize> = dims
            .iter()
            .map(|&d| resolve_dim("permute", d, rank))
            .collect::<Result<_>>()?;
        let mut seen = vec![false; rank];
        for &p in &perm {
            if std::mem::replace(&mut seen[p], true) {
                return Err(Error::invalid(
                    "permute",
                    format!("dims {dims:?} repeat a dimension"),
                ));
            }
        }
        let mut inverse = vec![0isize; rank];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i as isize;
        }
        Ok(self.view_op(self.layout().permuted(&perm), move || {
            backward_fn("permute", move |g, _| Ok(vec![Some(g.permute(&inverse)?)]))
        }))
    }

    pub fn transpose(&self, a: isize, b: isize) -> Result<Tensor> {
        let rank = self.rank();
        let (a, b) = (
            resolve_dim("transpose", a, rank)?,
            resolve_dim("transpose", b, rank)?,
        );
        let mut perm: Vec<isize> = (0..rank as isize).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// Matrix transpose of the last two dims.
    pub fn t(&self) -> Result<Tensor> {
        if self.rank() < 2 {
            return Ok(self.clone());
        }
        self.transpose(-2, -1)
    }

    /// Elements `start..start+len` along `dim`.
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Tensor> {
        let d = resolve_dim("narrow", dim, self.rank())?;
        let size = self.shape()[d];
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(Error::invalid(
                "narrow",
                format!(
                    "range {start}..{} exceeds size {size} of dim {d}",
                    start.saturating_add(len)
                ),
            ));
        }
        let in_shape = self.shape().to_vec();
        let (dtype, device) = (self.dtype(), self.device());
        Ok(
            self.view_op(self.layout().narrowed(d, start, len), move || {
                backward_fn("narrow", move |g, _| {
                    let zeros = |n: usize| -> Result<Option<Tensor>> {
                        let mut s = in_shape.clone();
                        s[d] = n;
                        (n > 0)
                            .then(|| Tensor::zeros(&s, dtype, device))
                            .transpose()
                    };
                    let parts: Vec<Tensor> = [
                        zeros(start)?,
                        Some(g.clone()),
                        zeros(in_shape[d] - start - len)?,
                    ]
                    .into_iter()
                    .flatten()
                    .collect();
                    Ok(vec![Some(Tensor::cat(&parts, d as isize)?)])
                })
            }),
        )
    }

    /// Python-style slice `start..end` (negative values count from the end) along `dim`.
    pub fn slice(&self, dim: isize, start: isize, end: isize) -> Result<Tensor> {
        let d = resolve_dim("slice", dim, self.rank())?;
        let size = self.shape()[d] as isize;
        let clamp = |i: isize| {
            if i < 0 {
                (i + size).max(0)
            } else {
                i.min(size)
            }
        };
        let (s, e) = (clamp(start), clamp(end));
        self.narrow(d as isize, s as usize, (e - s).max(0) as usize)
    }

    /// Broadcasts to `shape` without copying (size-1 and missing leading dims repeat).
    pub fn expand(&self, shape: &[usize]) -> Result<Tensor> {
        if shape == self.shape() {
            return Ok(self.clone());
        }
        let layout = self.layout().broadcast_to("expand", shape)?;
        let in_shape = self.shape().to_vec();
        Ok(self.view_op(layout, move || {
            backward_fn("expand", move |g, _| {
                Ok(vec![Some(g.sum_to_shape(&in_shape)?)])
            })
        }))
    }

    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        self.expand(shape)
    }

    /// Sums broadcast dims away so a gradient matches `shape` (the adjoint of `expand`).
    pub fn sum_to_shape(&self, shape: &[usize]) -> Result<Tensor> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        let extra = self
            .rank()
            .checked_sub(shape.len())
            .ok_or_else(|| Error::ShapeMismatch {
                op: "sum_to_shape",
                lhs: self.shape().to_vec(),
                rhs: shape.to_vec(),
            })?;
        let dims: Vec<isize> = (0..self.rank())
            .filter(|&i| i < extra || (shape[i - extra] == 1 && self.shape()[i] != 1))
            .map(|i| i as isize)
            .collect();
        let summed = if dims.is_empty() {
            self.clone()
        } else {
            self.sum_dims(&dims, true)?
        };
        summed.reshape_to(shape)
    }

    pub fn squeeze(&self, dim: isize) -> Result<Tensor> {
        let d = resolve_dim("squeeze", dim, self.rank())?;
        if self.shape()[d] != 1 {
            return Ok(self.clone());
        }
        let in_shape = self.shape().to_vec();
        Ok(self.view_op(self.layout().squeezed(d), move || {
            backward_fn("squeeze", move |g, _| {
                Ok(vec![Some(g.reshape_to(&in_shape)?)])
            })
        }))
    }

    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor> {
        let d = resolve_dim("unsqueeze", dim, self.rank() + 1)?;
        let in_shape = self.shape().to_vec();
        Ok(self.view_op(self.layout().unsqueezed(d), move || {
            backward_fn("unsqueeze", move |g, _| {
                Ok(vec![Some(g.reshape_to(&in_shape)?)])
            })
        }))
    }

    /// Splits along `dim` into pieces of `size` (the last may be shorter).
    pub fn split(&self, size: usize, dim: isize) -> Result<Vec<Tensor>> {
        let d = resolve_dim("split", dim, self.rank())?;
        if size == 0 {
            return Err(Error::invalid("split", "split size must be positive"));
        }
        let n = self.shape()[d];
        let sizes: Vec<usize> = (0..n).step_by(size).map(|s| size.min(n - s)).collect();
        self.split_with_sizes(&sizes, dim)
    }

    /// Views of consecutive pieces along `dim` with these sizes, which must add up to the dim
    /// (as torch.split with a list). The pieces are one node: backward joins their gradients
    /// (zeros for a piece nothing used) into one tensor, so a fused q/k/v product's gradient
    /// is one concatenation, not three padded copies added together.
    pub fn split_with_sizes(&self, sizes: &[usize], dim: isize) -> Result<Vec<Tensor>> {
        let d = resolve_dim("split", dim, self.rank())?;
        let total = sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s));
        if total != Some(self.shape()[d]) {
            return Err(Error::invalid(
                "split",
                format!(
                    "sizes {sizes:?} do not add up to {} (dim {d} of {:?})",
                    self.shape()[d],
                    self.shape()
                ),
            ));
        }
        let mut start = 0;
        let pieces: Vec<Tensor> = sizes
            .iter()
            .map(|&len| {
                let piece = self.detached_view(self.layout().narrowed(d, start, len));
                start += len;
                piece
            })
            .collect();
        let shapes: Vec<Vec<usize>> = pieces.iter().map(|p| p.shape().to_vec()).collect();
        let (dtype, device) = (self.dtype(), self.device());
        Ok(Tensor::recorded_outputs(pieces, &[self], move || {
            SplitBackward {
                dim: d,
                shapes,
                dtype,
                device,
            }
        }))
    }

    /// Splits along `dim` into `chunks` nearly equal pieces, as torch.chunk.
    pub fn chunk(&self, chunks: usize, dim: isize) -> Result<Vec<Tensor>> {
        let d = resolve_dim("chunk", dim, self.rank())?;
        if chunks == 0 {
            return Err(Error::invalid("chunk", "number of chunks must be positive"));
        }
        self.split(self.shape()[d].div_ceil(chunks).max(1), dim)
    }

    /// A copy in another dtype (the same tensor when it already has it).
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        // A wider dtype needs a larger buffer than the one that fit: checked like any other
        // allocation whose size comes from input, so it is an error and not an abort.
        crate::tensor::memory::check_alloc("to_dtype", self.shape(), dtype, self.device())?;
        let storage = dispatch(
            "to_dtype",
            [self],
            |[(s, l)]| Ok(elementwise::cast(s, l, dtype).into()),
            |[(s, l)]| Ok(cuda::copy::cast(s, l, dtype)?.into()),
        )?;
        let in_dtype = self.dtype();
        let out = Tensor::from_op(storage, self.shape(), &[self], || {
            backward_fn("to_dtype", move |g, needs| {
                Ok(vec![grad_if(needs[0], || g.to_dtype(in_dtype))?])
            })
        })?;
        if !dtype.is_float() && out.requires_grad() {
            // Casting to an integer type ends the graph, as in PyTorch.
            return Ok(out.detach());
        }
        Ok(out)
    }

    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        if device == self.device() {
            return Ok(self.clone());
        }
        let storage = crate::autograd::no_grad(|| self.transfer(device))?;
        let from = self.device();
        Tensor::from_op(storage, self.shape(), &[self], || {
            backward_fn("to_device", move |g, needs| {
                Ok(vec![grad_if(needs[0], || g.to_device(from))?])
            })
        })
    }

    /// This tensor's elements, packed, in a storage on `device`.
    pub(crate) fn transfer(&self, device: Device) -> Result<Storage> {
        let packed = self.contiguous()?;
        let whole = packed.layout().offset() == 0 && packed.storage().len() == packed.numel();
        let packed = if whole {
            packed
        } else {
            packed.contiguous_copy()?
        };
        let src = packed.storage();
        Ok(match (&*src, device) {
            (Storage::Cpu(s), Device::Cuda(n)) => {
                Storage::Cuda(CudaStorage::from_cpu(&cuda::device(n)?, s)?)
            }
            (Storage::Cuda(s), Device::Cpu) => Storage::Cpu(s.to_cpu()?),
            (Storage::Cuda(s), Device::Cuda(n)) => {
                Storage::Cuda(CudaStorage::from_cpu(&cuda::device(n)?, &s.to_cpu()?)?)
            }
            (Storage::Cpu(_), Device::Cpu) => unreachable!("same device returns early"),
        })
    }

    /// Both `to_dtype` and `to_device`.
    pub fn to(&self, device: Device, dtype: DType) -> Result<Tensor> {
        self.to_device(device)?.to_dtype(dtype)
    }

    /// Layout of a contiguous tensor of this shape.
    pub fn contiguous_layout(&self) -> Layout {
        Layout::contiguous(self.shape())
    }
}

/// The backward of `split_with_sizes`: the pieces' gradients side by side along `dim`.
struct SplitBackward {
    dim: usize,
    shapes: Vec<Vec<usize>>,
    dtype: DType,
    device: Device,
}

impl SplitBackward {
    /// The joined gradient as a view, when the pieces' gradients already lie side by side
    /// along `dim` in one storage (the halves of a packed SwiGLU gradient).
    fn side_by_side(&self, grads: &[Option<Tensor>]) -> Option<Tensor> {
        let parts: Vec<&Tensor> = grads.iter().map(Option::as_ref).collect::<Option<_>>()?;
        let first = parts.first()?;
        let l0 = first.layout();
        let mut shape = l0.shape().to_vec();
        shape[self.dim] = parts.iter().map(|p| p.shape()[self.dim]).sum();
        let whole = Layout::new(shape, l0.strides().to_vec(), l0.offset());
        let mut start = 0;
        for p in &parts {
            let len = p.shape()[self.dim];
            let same_storage = Arc::ptr_eq(p.storage_cell(), first.storage_cell());
            if !same_storage || *p.layout() != whole.narrowed(self.dim, start, len) {
                return None;
            }
            start += len;
        }
        let fits = whole.storage_extent() <= first.storage_cell().read().len();
        fits.then(|| first.detached_view(whole))
    }
}

impl Backward for SplitBackward {
    fn name(&self) -> &'static str {
        "split"
    }

    fn backward(&self, g: &Tensor, needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        self.backward_outputs(&[Some(g.clone())], needs)
    }

    fn backward_outputs(
        &self,
        grads: &[Option<Tensor>],
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        if grads.len() != self.shapes.len() {
            return Err(Error::Backward(format!(
                "split made {} pieces but received {} gradients",
                self.shapes.len(),
                grads.len()
            )));
        }
        if !needs[0] {
            return Ok(vec![None]);
        }
        if let Some(whole) = self.side_by_side(grads) {
            return Ok(vec![Some(whole)]);
        }
        let parts = grads
            .iter()
            .zip(&self.shapes)
            .map(|(g, shape)| match g {
                Some(g) => Ok(g.clone()),
                None => Tensor::zeros(shape, self.dtype, self.device),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(vec![Some(Tensor::cat(&parts, self.dim as isize)?)])
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    /// Sizes whose product wraps around to the element count (here 2 · 2^63 = 2^64 = 0 for an
    /// empty tensor) are an error, not a panic (found by the ONNX graph corruption cases).
    #[test]
    fn a_shape_whose_product_overflows_is_an_error() {
        let empty = Tensor::zeros(&[0], DType::F32, crate::Device::Cpu).unwrap();
        let e = empty.reshape_to(&[2, 1 << 63]).unwrap_err().to_string();
        assert!(e.contains("reshape"), "{e}");
    }

    #[test]
    fn unflatten_of_a_strided_piece_is_a_view_with_the_reshaped_values_and_gradient() {
        let x = Tensor::from_f64s(
            &(0..24).map(f64::from).collect::<Vec<_>>(),
            &[2, 12],
            DType::F64,
        )
        .unwrap()
        .requires_grad_()
        .unwrap();
        // Columns 4..10 of each row: not contiguous, so `reshape_to` would copy.
        let piece = x.narrow(1, 4, 6).unwrap();
        let heads = piece.unflatten(-1, &[3, 2]).unwrap();
        assert!(heads.shares_storage(&x));
        assert_eq!(heads.shape(), [2, 3, 2]);
        let want = piece.contiguous().unwrap().reshape_to(&[2, 3, 2]).unwrap();
        assert_eq!(
            heads.to_vec::<f64>().unwrap(),
            want.to_vec::<f64>().unwrap()
        );
        let probe = Tensor::from_f64s(
            &(0..12).map(f64::from).collect::<Vec<_>>(),
            &[2, 3, 2],
            DType::F64,
        )
        .unwrap();
        heads
            .mul(&probe)
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        let g: Vec<f64> = x.grad().unwrap().to_vec().unwrap();
        let mut expected = vec![0.0; 24];
        for r in 0..2 {
            for c in 0..6 {
                expected[r * 12 + 4 + c] = (r * 6 + c) as f64;
            }
        }
        assert_eq!(g, expected);
        assert!(piece.unflatten(-1, &[4, 2]).is_err());
    }
}
