//! In-place updates. They run outside the graph: writing into a leaf that requires grad needs
//! no_grad (as an optimizer step does), and each write bumps the storage version so a backward
//! that saved this storage fails instead of using the new values.

use super::dispatch::{dispatch, dispatch_mut};
use super::Tensor;
use crate::autograd::is_grad_enabled;
use crate::backend::{cuda, CpuStorage};
use crate::{cpu_dispatch2, Error, Result};

impl Tensor {
    pub(crate) fn check_inplace(&self, op: &'static str) -> Result<()> {
        if is_grad_enabled() && self.requires_grad() {
            return Err(Error::InPlaceOnLeaf { op });
        }
        Ok(())
    }

    /// Writes `src` (broadcast to self's shape, cast to self's dtype) into self's view.
    pub fn copy_(&self, src: &Tensor) -> Result<()> {
        self.check_inplace("copy_")?;
        let overlapping = self
            .shape()
            .iter()
            .zip(self.layout().strides())
            .any(|(&d, &s)| d > 1 && s == 0);
        if overlapping {
            return Err(Error::invalid("copy_", format!("cannot write into a broadcast view of shape {:?}: several elements share one memory location; write into a contiguous copy", self.shape())));
        }
        self.check_same_device("copy_", src)?;
        // The copy below reads src as packed from its start. A src that already is that, in
        // its own storage, is read as it is (an in-place op's fresh result); anything else is
        // materialized first: it may alias self, and the write lock must not wait on our own
        // read.
        let packed_apart = src.is_contiguous()
            && src.layout().offset() == 0
            && src.dtype() == self.dtype()
            && src.shape() == self.shape()
            && !src.shares_storage(self);
        let src = if packed_apart {
            src.clone()
        } else {
            crate::autograd::no_grad(|| {
                src.expand(self.shape())?
                    .to_dtype(self.dtype())?
                    .contiguous_copy()
            })?
        };
        dispatch_mut(
            "copy_",
            self,
            [&src],
            |(dst, layout), [(s, _)]| {
                write_view(dst, layout, s);
                Ok(())
            },
            |(dst, layout), [(s, _)]| {
                let packed = crate::Layout::contiguous(layout.shape());
                cuda::copy::copy_view(s, &packed, dst, layout)
            },
        )
    }

    /// A fresh contiguous copy that never shares storage with self.
    pub fn contiguous_copy(&self) -> Result<Tensor> {
        let storage = dispatch(
            "contiguous_copy",
            [self],
            |[(s, l)]| Ok(crate::backend::cpu::elementwise::cast(s, l, s.dtype()).into()),
            |[(s, l)]| Ok(cuda::copy::cast(s, l, s.dtype())?.into()),
        )?;
        Tensor::from_storage(storage, self.shape())
    }

    fn update_(&self, op: &'static str, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<()> {
        self.check_inplace(op)?;
        let new = crate::autograd::no_grad(|| f(self))?;
        let _guard = crate::autograd::NoGradGuard::new();
        self.copy_(&new)
    }

    pub fn add_(&self, other: &Tensor) -> Result<()> {
        self.update_("add_", |s| s.add(other))
    }
    pub fn sub_(&self, other: &Tensor) -> Result<()> {
        self.update_("sub_", |s| s.sub(other))
    }
    pub fn mul_(&self, other: &Tensor) -> Result<()> {
        self.update_("mul_", |s| s.mul(other))
    }
    pub fn div_(&self, other: &Tensor) -> Result<()> {
        self.update_("div_", |s| s.div(other))
    }
    pub fn mul_scalar_(&self, v: f64) -> Result<()> {
        self.update_("mul_", |s| s.scalar_affine(v, 0.0))
    }
    pub fn add_scalar_(&self, v: f64) -> Result<()> {
        self.update_("add_", |s| s.scalar_affine(1.0, v))
    }

    /// `x * mul + add` for the in-place scalar ops: one kernel, with no scalar tensor to make,
    /// where the result keeps x's dtype. An integer tensor with a fractional scalar goes
    /// through the promoting binary op, and `copy_` then truncates the result back into the
    /// integer tensor (PyTorch refuses that case instead).
    fn scalar_affine(&self, mul: f64, add: f64) -> Result<Tensor> {
        if self.dtype().is_float() || (mul.fract() == 0.0 && add.fract() == 0.0) {
            return self.affine(mul, add);
        }
        self.mul_scalar(mul)?.add_scalar(add)
    }
    pub fn fill_(&self, v: f64) -> Result<()> {
        self.update_("fill_", |s| Tensor::full_like(s, v))
    }
    pub fn zero_(&self) -> Result<()> {
        self.fill_(0.0)
    }
}

/// Writes contiguous `src` into the strided view `layout` of `dst`.
/// Writes the first elements of `src`, packed, into the view `layout` of `dst`.
fn write_view(dst: &mut CpuStorage, layout: &crate::Layout, src: &CpuStorage) {
    cpu_dispatch2!(dst, src, (d, s) => {
        if let Some(r) = layout.contiguous_range() {
            // src may hold more than the view (a packed view at the start of a larger storage).
            let n = r.len();
            d[r].copy_from_slice(&s[..n]);
        } else {
            let mut k = 0;
            layout.for_each_index(|i| {
                d[i] = s[k];
                k += 1;
            });
        }
    })
}
