//! The rotary epilogue of the q/k/v product: q and k rotated as `rope_cache_write` rotates them,
//! k and v written into the caches at the device cursor, as one launch with the products.

use super::*;

/// The rotary epilogue's operands: the F32 cos and sin rows [rows, head_dim] with row stride
/// `table_stride`, and the caches [rows, kv_heads, capacity, head_dim] of the weights' dtype.
pub struct RotaryWrite<'a> {
    pub cos: At<'a>,
    pub sin: At<'a>,
    pub table_stride: usize,
    pub head_dim: usize,
    pub cache: CacheSlot<'a>,
}

/// Mirrors `struct GemvRotary` in the kernel file.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct RotaryArgs {
    pub(super) cos: u64,
    pub(super) sin: u64,
    pub(super) table_sb: i64,
    pub(super) k_cache: u64,
    pub(super) v_cache: u64,
    pub(super) cursor: u64,
    pub(super) err: u64,
    pub(super) capacity: i32,
    pub(super) head_dim: i32,
    pub(super) code: i32,
}

/// Whether `Epilogue::Rotary` takes products with weights of `dtype`, k columns and heads of
/// `head_dim`: the tensor-core kernels, whose 16-row tiles pair 8 dims of a head with the 8 a
/// half head on, so head_dim a multiple of 16.
pub fn rotates(k: usize, dtype: DType, head_dim: usize) -> bool {
    tensor_cores(k, dtype) && head_dim > 0 && head_dim.is_multiple_of(16)
}

/// The checks of `Epilogue::Rotary` on `rows` rows of products with `weights` (rows of each)
/// of `dtype`, writing `out_dtype`; the kernel's arguments.
pub(super) fn rotary_args(
    r: &RotaryWrite,
    rows: usize,
    k: usize,
    weights: &[usize],
    dtype: DType,
    out_dtype: DType,
    dev: &CudaDevice,
) -> Result<RotaryArgs> {
    let hd = r.head_dim;
    if !rotates(k, dtype, hd) {
        return Err(invalid(format!(
            "the rotary epilogue needs BF16/F16 weights with k a multiple of 64 and a head_dim a multiple of 16, got {dtype:?}, k {k} and head_dim {hd}"
        )));
    }
    let [n_q, n_k, n_v] = weights else {
        return Err(invalid(format!(
            "the rotary epilogue takes three weights (q, k, v), got {}",
            weights.len()
        )));
    };
    if !n_q.is_multiple_of(hd) || n_k != n_v || !n_k.is_multiple_of(hd) || *n_k == 0 {
        return Err(invalid(format!(
            "q, k and v of {n_q}, {n_k} and {n_v} rows are not whole heads of {hd} with k and v alike"
        )));
    }
    let cache = &r.cache;
    for (name, c) in [("key", &*cache.k), ("value", &*cache.v)] {
        if c.dtype() != dtype || c.len() < rows * n_k * cache.capacity {
            return Err(invalid(format!(
                "the {name} cache ({:?}, {} elements) must be {dtype:?} and hold {rows} rows of {} heads x {} positions x {hd}",
                c.dtype(),
                c.len(),
                n_k / hd,
                cache.capacity
            )));
        }
    }
    if out_dtype != dtype {
        return Err(invalid(format!(
            "the rotated q is stored in the weights' dtype {dtype:?}, not {out_dtype:?}"
        )));
    }
    for (name, (t, _)) in [("cos", r.cos), ("sin", r.sin)] {
        if t.dtype() != DType::F32 {
            return Err(invalid(format!(
                "the {name} table must be F32, got {:?}",
                t.dtype()
            )));
        }
    }
    let span = (rows - 1) * r.table_stride + hd;
    let (cos, sin) = (
        check_span("the cos table", r.cos, span, false)?,
        check_span("the sin table", r.sin, span, false)?,
    );
    if cache.cursor.0.dtype() != DType::I64 {
        return Err(invalid(format!(
            "the cache cursor must be I64, got {:?}",
            cache.cursor.0.dtype()
        )));
    }
    if rows * n_k * cache.capacity > i64::MAX as usize || cache.capacity > i32::MAX as usize {
        return Err(invalid(format!(
            "a cache of {} positions is too large",
            cache.capacity
        )));
    }
    Ok(RotaryArgs {
        cos,
        sin,
        table_sb: r.table_stride as i64,
        k_cache: cache.k.ptr(),
        v_cache: cache.v.ptr(),
        cursor: check_span("the cache cursor", cache.cursor, 1, false)?,
        err: dev.error_word(),
        capacity: cache.capacity as i32,
        head_dim: hd as i32,
        code: FLAG_CACHE_CURSOR as i32,
    })
}
