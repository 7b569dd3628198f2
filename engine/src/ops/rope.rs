//! rotary_embedding: x * cos + rotate_half(x) * sin over the last dim, with
//! rotate_half([a, b]) = [-b, a] (Hugging Face LLaMA's layout).
//!
//! On CUDA one kernel reads x and the tables once and writes y in x's own dim order (so a
//! token-major view of a projection stays token-major); its backward is the same kernel
//! transposed. The tables are constants there: when cos or sin needs a gradient, or on the
//! CPU, the op runs as the composition of narrow, cat, mul and add.

use super::backward_fn;
use super::dispatch::{cuda_kernel, cuda_kernel_into, CudaOperand};
use crate::autograd::{is_grad_enabled, no_grad, Backward};
use crate::backend::cuda::rope::{self as cuda, QkvDims, View};
use crate::backend::Storage;
use crate::{DType, Device, Error, Layout, Result, Tensor};

const OP: &str = "rotary_embedding";
const QKV_OP: &str = "rotary_qkv";

impl Tensor {
    /// Rotary position embedding of `self` [..., dim] (dim even) with `cos` and `sin` tables
    /// that broadcast against it, typically [seq, dim] or [batch, 1, seq, dim].
    pub fn rotary_embedding(&self, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        for t in [self, cos, sin] {
            t.check_float(OP)?;
            self.check_same_device(OP, t)?;
        }
        let dim = match self.shape().last() {
            Some(&d) if d % 2 == 0 => d,
            _ => {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "x needs an even last dim to rotate in halves; got shape {:?}",
                        self.shape()
                    ),
                ))
            }
        };
        let shape = self.shape().to_vec();
        let (cos_b, sin_b) = (cos.broadcast_to(&shape)?, sin.broadcast_to(&shape)?);
        let tables_need_grad = is_grad_enabled() && (cos.requires_grad() || sin.requires_grad());
        if matches!(self.device(), crate::Device::Cuda(_)) && self.rank() <= 4 && !tables_need_grad
        {
            let (cos, sin) = kernel_tables(cos, sin, &shape)?;
            return fused(self, cos, sin);
        }
        let half = dim / 2;
        let first = self.narrow(-1, 0, half)?;
        let second = self.narrow(-1, half, half)?;
        let rotated = Tensor::cat(&[second.neg()?, first], -1)?;
        let dtype = self.dtype();
        self.mul(&cos_b.to_dtype(dtype)?)?
            .add(&rotated.mul(&sin_b.to_dtype(dtype)?)?)
    }
}

/// cos and sin as the rotation kernels read them: F32, broadcast to `shape` (constants: no
/// gradient is recorded), each row's dims adjacent.
fn kernel_tables(cos: &Tensor, sin: &Tensor, shape: &[usize]) -> Result<(Tensor, Tensor)> {
    no_grad(|| {
        let dense = |t: &Tensor| -> Result<Tensor> {
            let t = t.to_dtype(DType::F32)?.broadcast_to(shape)?;
            match t.layout().strides().last() {
                Some(1) | None => Ok(t),
                _ => t.contiguous(),
            }
        };
        Ok((dense(cos)?, dense(sin)?))
    })
}

impl Tensor {
    /// The heads of q, k and v from one projection `self` [batch, seq, nq + nk + nv] (training's
    /// product with the three weights side by side), q and k rotated by `cos` and `sin` as
    /// `rotary_embedding` rotates them: returns [batch, heads, seq, head_dim] for each, v a view
    /// of self. On CUDA the backward writes the projection's gradient as one buffer in one pass
    /// (`rope_qkv_backward`); rotating the parts apart would leave three gradients for the
    /// split to copy side by side. The tables broadcast against [batch, heads, seq, head_dim]
    /// and, on that path, not over the heads.
    pub fn rotary_qkv(
        &self,
        sizes: [usize; 3],
        head_dim: usize,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<[Tensor; 3]> {
        for t in [self, cos, sin] {
            t.check_float(QKV_OP)?;
            self.check_same_device(QKV_OP, t)?;
        }
        let cols: usize = sizes.iter().sum();
        // Even heads: a rotation pairs each dim with the one half a head away.
        let whole_heads = head_dim > 0
            && head_dim.is_multiple_of(2)
            && sizes.iter().all(|s| s.is_multiple_of(head_dim));
        if self.rank() != 3 || self.shape()[2] != cols || !whole_heads {
            return Err(Error::invalid(
                QKV_OP,
                format!(
                    "a projection [batch, seq, {cols}] of q, k, v sizes {sizes:?} in heads of \
                     {head_dim} (an even size) is needed; got {:?}",
                    self.shape()
                ),
            ));
        }
        let heads = |t: &Tensor| {
            t.unflatten(-1, &[t.shape()[2] / head_dim, head_dim])?
                .transpose(1, 2)
        };
        let tables_need_grad = is_grad_enabled() && (cos.requires_grad() || sin.requires_grad());
        let on_cuda = matches!(self.device(), Device::Cuda(_));
        if !on_cuda || tables_need_grad || self.layout().strides()[2] != 1 {
            let parts = self.split_with_sizes(&sizes, -1)?;
            let [q, k, v] = [&parts[0], &parts[1], &parts[2]].map(heads);
            return Ok([
                q?.rotary_embedding(cos, sin)?,
                k?.rotary_embedding(cos, sin)?,
                v?,
            ]);
        }
        let (q, k, v) = no_grad(|| -> Result<_> {
            let parts = self.split_with_sizes(&sizes, -1)?;
            Ok((heads(&parts[0])?, heads(&parts[1])?, heads(&parts[2])?))
        })?;
        let (cos_q, sin_q) = kernel_tables(cos, sin, q.shape())?;
        let (cos_k, sin_k) = kernel_tables(cos, sin, k.shape())?;
        let q_rot = run(&q, &cos_q, &sin_q, false)?;
        let k_rot = run(&k, &cos_k, &sin_k, false)?;
        let backward = QkvBackward {
            shapes: [q.shape().to_vec(), k.shape().to_vec(), v.shape().to_vec()],
            tables: [cos_q, sin_q, cos_k, sin_k],
            dims: QkvDims {
                batch: self.shape()[0],
                seq: self.shape()[1],
                sizes,
                head_dim,
            },
            dtype: self.dtype(),
            device: self.device(),
        };
        let outs = Tensor::recorded_outputs(vec![q_rot, k_rot, v], &[self], move || backward);
        <[Tensor; 3]>::try_from(outs).map_err(|_| Error::invalid(QKV_OP, "three outputs"))
    }
}

/// rotary_qkv's backward: the projection's gradient from those of the three heads.
struct QkvBackward {
    shapes: [Vec<usize>; 3],
    /// cos and sin broadcast to q's heads, then to k's.
    tables: [Tensor; 4],
    dims: QkvDims,
    dtype: DType,
    device: Device,
}

/// A [batch, heads, seq, dim] view's strides in [batch, seq, head] order, when its last dim is
/// contiguous.
fn token_major(t: &Tensor) -> Option<[usize; 3]> {
    let s = t.layout().strides();
    (s[3] == 1).then(|| [s[0], s[2], s[1]])
}

impl QkvBackward {
    /// The one-pass kernel's gradient, or `None` when a view does not suit it.
    fn fused(&self, grads: &[Tensor; 3]) -> Result<Option<Tensor>> {
        let [cos, sin, cos_k, sin_k] = &self.tables;
        // The kernel reads one table view for the rows of q and of k: the tables must not vary
        // over the heads (they never do; a rotation is a position's).
        let same_over_heads = [cos, sin, cos_k, sin_k]
            .iter()
            .all(|t| t.layout().strides()[1] == 0)
            && token_major(cos) == token_major(cos_k)
            && token_major(sin) == token_major(sin_k);
        let views: Option<Vec<[usize; 3]>> =
            grads.iter().chain([cos, sin]).map(token_major).collect();
        let (Some(views), true) = (views, same_over_heads) else {
            return Ok(None);
        };
        let [dq, dk, dv] = grads;
        let dims = self.dims;
        let out = cuda_kernel(QKV_OP, [dq, dk, dv, cos, sin], |ops| {
            let view = |i: usize| View {
                storage: ops[i].0,
                offset: ops[i].1.offset(),
                strides: views[i],
            };
            cuda::rope_qkv_backward([view(0), view(1), view(2)], view(3), view(4), dims)
        })?;
        let shape = [dims.batch, dims.seq, dims.sizes.iter().sum()];
        out.map(|s| Tensor::from_storage(Storage::Cuda(s), &shape))
            .transpose()
    }
}

impl Backward for QkvBackward {
    fn name(&self) -> &'static str {
        QKV_OP
    }

    fn backward(&self, g: &Tensor, needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        self.backward_outputs(&[Some(g.clone()), None, None], needs)
    }

    fn backward_outputs(
        &self,
        grads: &[Option<Tensor>],
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        if !needs.first().copied().unwrap_or(false) {
            return Ok(vec![None]);
        }
        let mut full = Vec::with_capacity(3);
        for (g, shape) in grads.iter().zip(&self.shapes) {
            full.push(match g {
                Some(g) => g.to_dtype(self.dtype)?,
                None => Tensor::zeros(shape, self.dtype, self.device)?,
            });
        }
        let grads: [Tensor; 3] = full
            .try_into()
            .map_err(|_| Error::Backward(format!("{QKV_OP} has three outputs")))?;
        if let Some(dx) = self.fused(&grads)? {
            return Ok(vec![Some(dx)]);
        }
        // The composition: each part's transposed rotation, then the parts side by side.
        let [cos, sin, cos_k, sin_k] = &self.tables;
        let [dq, dk, dv] = &grads;
        let rows = |t: Tensor| {
            let s = t.shape().to_vec();
            t.transpose(1, 2)?.reshape_to(&[s[0], s[2], s[1] * s[3]])
        };
        let dq = rows(run(dq, cos, sin, true)?)?;
        let dk = rows(run(dk, cos_k, sin_k, true)?)?;
        let dv = rows(dv.clone())?;
        Ok(vec![Some(Tensor::cat(&[dq, dk, dv], -1)?)])
    }
}

/// One decode step's rotary embedding and cache write: returns rope(q) for q [batch, heads, 1,
/// dim], and writes rope(k) and v ([batch, kv_heads, 1, dim]) into the caches [batch, kv_heads,
/// capacity, dim] at position `cursor` (I64 [1], read on the device) along dim 2. cos and sin
/// are [batch, 1, 1, dim]. On CUDA it is one kernel; elsewhere, or when a gradient is needed,
/// the composition of `rotary_embedding` and `index_copy_`.
#[allow(clippy::too_many_arguments)]
pub fn rotary_into_cache(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    cursor: &Tensor,
) -> Result<Tensor> {
    const OP: &str = "rotary cache write";
    let (b, h, dim) = (q.shape()[0], q.shape()[1], q.shape()[3]);
    let kvh = k.shape()[1];
    let fits = |t: &Tensor, heads: usize| {
        t.shape() == [b, heads, 1, dim] && t.layout().strides()[3] == 1 && t.dtype() == q.dtype()
    };
    let table = |t: &Tensor| {
        t.dtype() == DType::F32 && t.shape() == [b, 1, 1, dim] && t.layout().strides()[3] == 1
    };
    let cache_ok = |c: &Tensor| {
        c.dtype() == q.dtype()
            && c.rank() == 4
            && c.shape()[..2] == [b, kvh]
            && c.shape()[3] == dim
            && c.layout().is_contiguous()
            && c.layout().offset() == 0
    };
    let kernel = matches!(q.device(), crate::Device::Cuda(_))
        && !(is_grad_enabled() && [q, k, v].iter().any(|t| t.requires_grad()))
        && q.rank() == 4
        && dim % 2 == 0
        && fits(q, h)
        && fits(k, kvh)
        && fits(v, kvh)
        && table(cos)
        && table(sin)
        && cache_ok(k_cache)
        && cache_ok(v_cache)
        && cursor.dtype() == DType::I64
        && cursor.numel() == 1
        && [k, v, cos, sin, k_cache, v_cache, cursor]
            .iter()
            .all(|t| t.device() == q.device());
    if !kernel {
        let q_rot = q.rotary_embedding(cos, sin)?;
        no_grad(|| -> Result<()> {
            k_cache.index_copy_(2, cursor, &k.rotary_embedding(cos, sin)?)?;
            v_cache.index_copy_(2, cursor, v)
        })?;
        return Ok(q_rot);
    }
    k_cache.check_inplace(OP)?;
    v_cache.check_inplace(OP)?;
    let heads = |t: &Tensor| {
        (
            t.layout().offset(),
            [t.layout().strides()[0], t.layout().strides()[1]],
        )
    };
    let out = cuda_kernel_into(
        OP,
        [k_cache, v_cache],
        [q, k, v, cos, sin, cursor],
        |[(kc, _), (vc, _)], [(qs, _), (ks, _), (vs, _), (cs, cl), (ss, sl), (cur, curl)]| {
            let view = |s, t: &Tensor| {
                let (offset, strides) = heads(t);
                cuda::Heads {
                    storage: s,
                    offset,
                    strides,
                }
            };
            cuda::rope_cache_write(
                view(qs, q),
                view(ks, k),
                view(vs, v),
                [(cs, cl.offset()), (ss, sl.offset())],
                cl.strides()[0],
                cuda::CacheSlot {
                    k: kc,
                    v: vc,
                    capacity: k_cache.shape()[2],
                    cursor: (cur, curl.offset()),
                },
                [b, h, kvh, dim],
            )
        },
    )?;
    Tensor::from_storage(Storage::Cuda(out), &[b, h, 1, dim])
}

/// A layout as [n0, n1, n2, dim] (leading 1s added) with its first three strides.
fn as_4d(l: &Layout) -> ([usize; 4], [usize; 3]) {
    let r = l.rank();
    let (mut dims, mut strides) = ([1usize; 4], [0usize; 4]);
    for i in 0..r {
        dims[4 - r + i] = l.shape()[i];
        strides[4 - r + i] = l.strides()[i];
    }
    (dims, [strides[0], strides[1], strides[2]])
}

/// The kernel's view of an operand.
fn view<'a>((storage, l): CudaOperand<'a>) -> View<'a> {
    View {
        storage,
        offset: l.offset(),
        strides: as_4d(l).1,
    }
}

/// One kernel pass over x (last dim made contiguous first if it is not), out in x's dim order.
fn run(x: &Tensor, cos: &Tensor, sin: &Tensor, inverse: bool) -> Result<Tensor> {
    let x = if x.layout().strides().last() == Some(&1) {
        x.clone()
    } else {
        no_grad(|| x.contiguous())?
    };
    let out = match x.layout().dense_like() {
        l if l.strides().last() == Some(&1) => l,
        _ => Layout::contiguous(x.shape()),
    };
    let (dims, _) = as_4d(x.layout());
    let (_, ys) = as_4d(&out);
    let y = cuda_kernel(OP, [&x, cos, sin], |[x, cos, sin]| {
        cuda::rope(
            view(x),
            view(cos),
            view(sin),
            dims,
            (ys, out.numel()),
            inverse,
        )
    })?;
    Tensor::from_storage_in(Storage::Cuda(y), out)
}

fn fused(x: &Tensor, cos: Tensor, sin: Tensor) -> Result<Tensor> {
    if cos.layout().strides().last() != Some(&1) || sin.layout().strides().last() != Some(&1) {
        // A table whose last dim is strided (or broadcast): give the kernel dense rows.
        let (c, s) = no_grad(|| Ok::<_, Error>((cos.contiguous()?, sin.contiguous()?)))?;
        return fused(x, c, s);
    }
    let y = run(x, &cos, &sin, false)?;
    Ok(y.recorded(&[x], move || {
        backward_fn(OP, move |g, needs| {
            let dx = match needs[0] {
                true => Some(run(g, &cos, &sin, true)?),
                false => None,
            };
            Ok(vec![dx])
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dim_turns_with_the_one_half_a_row_away() {
        // dim 4: (x0, x2) and (x1, x3) rotate by the angles in the tables.
        let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[1, 4]).unwrap();
        let (a, b) = (0.3f64, 1.1f64);
        let cos = Tensor::from_vec(vec![a.cos(), b.cos(), a.cos(), b.cos()], &[1, 4]).unwrap();
        let sin = Tensor::from_vec(vec![a.sin(), b.sin(), a.sin(), b.sin()], &[1, 4]).unwrap();
        let got: Vec<f64> = x.rotary_embedding(&cos, &sin).unwrap().to_vec().unwrap();
        let want = [
            a.cos() - 3.0 * a.sin(),
            2.0 * b.cos() - 4.0 * b.sin(),
            3.0 * a.cos() + a.sin(),
            4.0 * b.cos() + 2.0 * b.sin(),
        ];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn rotary_qkv_needs_whole_even_heads() {
        let x = Tensor::zeros(&[1, 2, 9], DType::F32, crate::Device::Cpu).unwrap();
        let t = Tensor::zeros(&[2, 3], DType::F32, crate::Device::Cpu).unwrap();
        let e = x.rotary_qkv([3, 3, 3], 3, &t, &t).unwrap_err().to_string();
        assert!(e.contains("an even size") && e.contains("[1, 2, 9]"), "{e}");
        let e = x.rotary_qkv([4, 4, 1], 4, &t, &t).unwrap_err().to_string();
        assert!(e.contains("[4, 4, 1]"), "{e}");
    }

    #[test]
    fn an_odd_last_dim_is_an_error() {
        let x = Tensor::zeros(&[2, 3], DType::F32, crate::Device::Cpu).unwrap();
        let e = x.rotary_embedding(&x, &x).unwrap_err().to_string();
        assert!(e.contains("even last dim") && e.contains("[2, 3]"), "{e}");
    }
}
