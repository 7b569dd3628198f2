//! Rotary position embedding in one pass (kernels/rope.cu), forward and transposed (backward).

use super::compile::ROPE;
use super::launch::{args, grid_for, type_suffix};
use super::CudaStorage;
use crate::{Error, Result};

/// Strides of the first three dims of a [n0, n1, n2, dim] view; mirrors `RopeView`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct RopeView {
    s0: i64,
    s1: i64,
    s2: i64,
}

/// One [n0, n1, n2, dim] operand with a contiguous last dim.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub storage: &'a CudaStorage,
    pub offset: usize,
    pub strides: [usize; 3],
}

impl View<'_> {
    fn raw(&self) -> (u64, RopeView) {
        let [s0, s1, s2] = self.strides.map(|s| s as i64);
        (self.storage.ptr_at(self.offset), RopeView { s0, s1, s2 })
    }
}

/// y = rope(x) (or its transpose with `inverse`) into a fresh buffer of `out_len` elements
/// written through `out_strides`; cos and sin are F32.
pub fn rope(
    x: View,
    cos: View,
    sin: View,
    dims: [usize; 4],
    out: ([usize; 3], usize),
    inverse: bool,
) -> Result<CudaStorage> {
    let dev = x.storage.cuda_device();
    let y = CudaStorage::alloc(dev, out.1, x.storage.dtype())?;
    let [n0, n1, n2, dim] = dims;
    let pairs = n0 * n1 * n2 * (dim / 2);
    if pairs == 0 {
        return Ok(y);
    }
    if pairs >= i32::MAX as usize {
        return Err(Error::invalid(
            "rotary_embedding",
            format!("{pairs} element pairs exceed the kernel's 32-bit indexing"),
        ));
    }
    let yv = View {
        storage: &y,
        offset: 0,
        strides: out.0,
    };
    let dtype = x.storage.dtype();
    let width = 16 / dtype.size_in_bytes();
    let vec = dtype != crate::DType::F64
        && (dim / 2).is_multiple_of(width)
        && [&x, &yv].iter().all(|v| words(v, width))
        && [&cos, &sin].iter().all(|v| words(v, 4));
    let name = if vec { "rope_vec" } else { "rope" };
    let f = dev.function(&ROPE, &format!("{name}_{}", type_suffix(dtype)))?;
    let ((xp, xv), (cp, cv), (sp, sv), (yp, yvv)) = (x.raw(), cos.raw(), sin.raw(), yv.raw());
    let (n1, n2, half, inv, p) = (
        n1 as i32,
        n2 as i32,
        (dim / 2) as i32,
        inverse as i32,
        pairs as i64,
    );
    let block = 256;
    let grid = grid_for(pairs / if vec { width } else { 1 }, block, dev.sm_count());
    // SAFETY: every view addresses [n0, n1, n2, dim] elements inside its storage (the caller
    // builds them from tensor layouts); y has out.1 elements covering out.0's reach.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            block,
            0,
            &mut args![xp, xv, cp, cv, sp, sv, yp, yvv, n1, n2, half, inv, p],
        )?
    };
    Ok(y)
}

/// Sizes of a projection [batch * seq, nq + nk + nv] of q, k and v heads of `head_dim`.
#[derive(Clone, Copy, Debug)]
pub struct QkvDims {
    pub batch: usize,
    pub seq: usize,
    /// Columns of q, k and v.
    pub sizes: [usize; 3],
    pub head_dim: usize,
}

/// The gradient of a projection whose q and k parts were rotated: [batch * seq, nq + nk + nv]
/// with rows [ rope^T(dq) | rope^T(dk) | dv ], one kernel. The gradients and the F32 tables are
/// views in [batch, seq, head, head_dim] order (their strides of b, t and the head). `None`
/// when the one pass cannot run: the halves of a head, or a view's rows, are not whole 16-byte
/// words (the caller then composes the rotations and a concatenation).
pub fn rope_qkv_backward(
    grads: [View; 3],
    cos: View,
    sin: View,
    dims: QkvDims,
) -> Result<Option<CudaStorage>> {
    let [dq, dk, dv] = grads;
    let dtype = dq.storage.dtype();
    let [nq, nk, nv] = dims.sizes;
    let cols = nq + nk + nv;
    let width = 16 / dtype.size_in_bytes();
    let fits = dtype != crate::DType::F64
        && dims.head_dim.is_multiple_of(2)
        && (dims.head_dim / 2).is_multiple_of(width)
        && [dk.storage, dv.storage].iter().all(|s| s.dtype() == dtype)
        && [&dq, &dk, &dv].iter().all(|v| words(v, width))
        && [&cos, &sin].iter().all(|v| words(v, 4));
    if !fits {
        return Ok(None);
    }
    let dev = dq.storage.cuda_device();
    let out = CudaStorage::alloc(dev, dims.batch * dims.seq * cols, dtype)?;
    let words_total = dims.batch * dims.seq * cols / width;
    if words_total == 0 {
        return Ok(Some(out));
    }
    if words_total >= i32::MAX as usize {
        return Err(Error::invalid(
            "rotary_qkv",
            format!("{words_total} words exceed the kernel's 32-bit indexing"),
        ));
    }
    let f = dev.function(&ROPE, &format!("rope_qkv_backward_{}", type_suffix(dtype)))?;
    let ((qp, qv), (kp, kv), (vp, vv)) = (dq.raw(), dk.raw(), dv.raw());
    let ((cp, cv), (sp, sv)) = (cos.raw(), sin.raw());
    let int = |n: usize| n as i32;
    let (seq, hd, w) = (int(dims.seq), int(dims.head_dim), words_total as i64);
    let (nq, nk, nv) = (int(nq), int(nk), int(nv));
    let yp = out.ptr();
    let block = 256;
    let grid = grid_for(words_total, block, dev.sm_count());
    // SAFETY: each gradient view addresses [batch, seq, its heads, head_dim] elements inside its
    // storage and each table view the same extent (the caller builds them from tensor
    // layouts); out holds batch * seq * cols elements, the kernel's whole range.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            block,
            0,
            &mut args![qp, qv, kp, kv, vp, vv, cp, cv, sp, sv, yp, seq, nq, nk, nv, hd, w],
        )?
    };
    Ok(Some(out))
}

/// Whether a view's rows start on 16-byte words of `width` elements: its first element and
/// every stride aligned (the vector kernel then reads each row's halves as whole words).
fn words(v: &View, width: usize) -> bool {
    v.storage.ptr_at(v.offset).is_multiple_of(16)
        && v.strides.iter().all(|s| s.is_multiple_of(width))
}

/// A [batch, n, dim] view with a contiguous last dim: its storage, first element and the
/// batch and head strides; mirrors `HeadsView` for the strides.
#[derive(Clone, Copy)]
pub struct Heads<'a> {
    pub storage: &'a CudaStorage,
    pub offset: usize,
    pub strides: [usize; 2],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct HeadsView {
    sb: i64,
    sh: i64,
}

impl Heads<'_> {
    fn raw(&self) -> (u64, HeadsView) {
        let [sb, sh] = self.strides.map(|s| s as i64);
        (self.storage.ptr_at(self.offset), HeadsView { sb, sh })
    }
}

/// The caches one decode step writes: [batch, kv_heads, capacity, dim] contiguous buffers and
/// the I64 cursor (storage and element offset) saying at which position.
pub struct CacheSlot<'a> {
    pub k: &'a mut CudaStorage,
    pub v: &'a mut CudaStorage,
    pub capacity: usize,
    pub cursor: (&'a CudaStorage, usize),
}

/// Error-word code for a cursor outside the caches; `launch::flag_op_name` names it.
pub(crate) const FLAG_CACHE_CURSOR: u32 = 7;

/// rope(q) into a fresh [batch, heads, dim] buffer, and rope(k) and v into the caches at the
/// cursor, in one kernel. `tables` are the F32 cos and sin rows [batch, dim] (storage, offset)
/// with batch stride `table_stride`.
pub fn rope_cache_write(
    q: Heads,
    k: Heads,
    v: Heads,
    tables: [(&CudaStorage, usize); 2],
    table_stride: usize,
    cache: CacheSlot,
    [batch, heads, kv_heads, dim]: [usize; 4],
) -> Result<CudaStorage> {
    let dev = q.storage.cuda_device();
    let dtype = q.storage.dtype();
    let q_out = CudaStorage::alloc(dev, batch * heads * dim, dtype)?;
    let pairs = batch * (heads + 2 * kv_heads) * (dim / 2);
    if pairs == 0 {
        return Ok(q_out);
    }
    if pairs >= i32::MAX as usize || cache.capacity >= i32::MAX as usize {
        return Err(Error::invalid(
            "rotary cache write",
            format!("{pairs} element pairs exceed the kernel's 32-bit indexing"),
        ));
    }
    let f = dev.function(&ROPE, &format!("rope_cache_write_{}", type_suffix(dtype)))?;
    let ((qp, qv), (kp, kv), (vp, vv)) = (q.raw(), k.raw(), v.raw());
    let (cp, sp) = (
        tables[0].0.ptr_at(tables[0].1),
        tables[1].0.ptr_at(tables[1].1),
    );
    let (tsb, po) = (table_stride as i64, q_out.ptr());
    let (kc, vc) = (cache.k.ptr(), cache.v.ptr());
    let cur = cache.cursor.0.ptr_at(cache.cursor.1);
    let (h, g, cap, half, p) = (
        heads as i32,
        kv_heads as i32,
        cache.capacity as i32,
        (dim / 2) as i32,
        pairs as i64,
    );
    let (err, code) = (dev.error_word(), FLAG_CACHE_CURSOR);
    let block = 256;
    let grid = grid_for(pairs, block, dev.sm_count());
    // SAFETY: q, k and v address [batch, n, dim] elements inside their storages, the tables
    // [batch, dim] F32 values, the caches batch*kv_heads*capacity*dim elements; the kernel
    // checks the cursor against the capacity before any write.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            block,
            0,
            &mut args![
                qp, qv, kp, kv, vp, vv, cp, sp, tsb, po, kc, vc, cur, h, g, cap, half, p, err, code
            ],
        )?
    };
    Ok(q_out)
}
