//! One query per (row, head) against a key/value cache whose visible window is read from
//! device memory (kernels/decode_attention.cu): the keys are split into chunks scored by
//! separate blocks, and the last block of each (row, head group) merges them. BF16/F16 caches
//! with head dims a multiple of 32 score and weigh a chunk on the tensor cores.

use super::compile::DECODE_ATTENTION;
use super::device::COUNTERS;
use super::launch::{args, type_suffix};
use super::CudaStorage;
use crate::spec::AttentionSpec;
use crate::{DType, Error, Result};

/// Keys a block scores; mirrors CHUNK in the kernel file.
const CHUNK: usize = 64;
/// The scores' row stride in floats; mirrors PS.
const PS: usize = CHUNK + 8;
const THREADS: u32 = 128;
/// The most query heads one block scores; mirrors MAX_HEADS.
const MAX_HEADS: usize = 16;

/// The query heads a block scores together: the largest divisor of the group that fits.
fn heads_per_block(group: usize) -> usize {
    (1..=group.min(MAX_HEADS))
        .rev()
        .find(|d| group.is_multiple_of(*d))
        .unwrap_or(1)
}

/// A contiguous operand: its storage and the element offset where it starts.
pub type At<'a> = (&'a CudaStorage, usize);

/// Operands, all contiguous: q [batch, heads, 1, head_dim], k and v [batch, kv_heads, tk,
/// head_dim] (tk is the cache's capacity), first [batch] and last [1] or [batch] (I64, with
/// `last_stride` 0 or 1): row b sees keys first[b] ..= last. Returns [batch, heads, 1,
/// head_dim] in q's dtype.
pub fn decode_attention(
    q: At,
    k: At,
    v: At,
    first: At,
    last: At,
    last_stride: usize,
    spec: &AttentionSpec,
) -> Result<CudaStorage> {
    const OP: &str = "decode_attention";
    let dev = q.0.cuda_device();
    let dtype = q.0.dtype();
    if !matches!(dtype, DType::F32 | DType::BF16 | DType::F16) {
        return Err(Error::UnsupportedDType {
            op: OP,
            dtype,
            detail: ": the decode kernels take F32, BF16 and F16".into(),
        });
    }
    let (b, h, kvh, tk, hd) = (
        spec.batch,
        spec.heads,
        spec.kv_heads,
        spec.tk,
        spec.head_dim,
    );
    let out = CudaStorage::alloc(dev, b * h * hd, dtype)?;
    if b * h * hd == 0 {
        return Ok(out);
    }
    let chunks = tk.div_ceil(CHUNK).max(1);
    let partial = CudaStorage::alloc(dev, b * h * chunks * hd, DType::F32)?;
    let stats = CudaStorage::alloc(dev, b * h * chunks * 2, DType::F32)?;
    let hb = heads_per_block(h / kvh);
    let at = |(s, offset): At| s.ptr_at(offset);
    let (pq, pk, pv, pf, pl) = (at(q), at(k), at(v), at(first), at(last));
    let mma = tensor_cores(dtype, hd) && (pq | pk | pv) % 16 == 0;
    let name = format!(
        "decode_attention_{}{}",
        if mma { "mma_" } else { "" },
        type_suffix(dtype)
    );
    let f = dev.function(&DECODE_ATTENTION, &name)?;
    let shared = shared_bytes(hb, hd, dtype, mma) as u32;
    let (pp, ps, pc, po) = (partial.ptr(), stats.ptr(), dev.counters(), out.ptr());
    let last_stride = last_stride as i32;
    let (hi, kvi, hbi, tki, hdi) = (h as i32, kvh as i32, hb as i32, tk as i32, hd as i32);
    let scale2 = (spec.scale * std::f64::consts::LOG2_E) as f32;
    // SAFETY: q holds b*h*hd, k and v b*kvh*tk*hd elements of `dtype`, first b and last b or
    // 1 I64 values; partial and stats are sized for every (row, head, chunk); the grid covers
    // exactly the chunks, head blocks and rows those sizes assume, and `supports` keeps the
    // (row, head block) counters within the device's.
    unsafe {
        dev.launch(
            f,
            (chunks as u32, (h / hb) as u32, b as u32),
            THREADS,
            shared,
            &mut args![
                pq,
                pk,
                pv,
                pf,
                pl,
                last_stride,
                pp,
                ps,
                pc,
                po,
                hi,
                kvi,
                hbi,
                tki,
                hdi,
                scale2
            ],
        )
    }?;
    Ok(out)
}

/// Whether a cache of `dtype` with `hd` head dims takes the tensor-core kernel (which also
/// needs its operands 16-byte aligned): 16-bit values, and head dims the kernel's four warps
/// split into n-tiles of 8.
fn tensor_cores(dtype: DType, hd: usize) -> bool {
    matches!(dtype, DType::BF16 | DType::F16) && hd.is_multiple_of(32) && hd <= 128
}

/// Shared memory of a chunk block (mirrors the kernel's layout): the queries (as floats, or in
/// the cache's dtype for all 16 rows of the tensor-core tile with rows padded by 8), the
/// scores and stats as floats (rounded up to 16 bytes), then the chunk's key and value rows in
/// the cache's dtype (padded by 8 on the tensor-core path).
fn shared_bytes(hb: usize, hd: usize, dtype: DType, mma: bool) -> usize {
    let (rows, q_floats, stride) = if mma {
        (16, 16 * (hd + 8) / 2, hd + 8)
    } else {
        (hb, hb * hd, hd)
    };
    (q_floats + rows * (PS + 2)).next_multiple_of(4) * 4
        + 2 * CHUNK * stride * dtype.size_in_bytes()
}

/// Whether the kernels take this problem: even head dims whose chunk tiles fit the 48 KB of
/// shared memory a block has without opting in (BF16 up to 128, F32 up to 64), any grouping.
pub fn supports(spec: &AttentionSpec, dtype: DType) -> bool {
    let hb = spec
        .heads
        .checked_div(spec.kv_heads)
        .map_or(1, heads_per_block);
    let mma = tensor_cores(dtype, spec.head_dim);
    shared_bytes(hb, spec.head_dim, dtype, mma) <= 48 << 10
        && shared_bytes(hb, spec.head_dim, dtype, false) <= 48 << 10
        && spec.head_dim.is_multiple_of(2)
        && spec.tq == 1
        && spec.kv_heads > 0
        && spec.heads.is_multiple_of(spec.kv_heads)
        && spec.batch * (spec.heads / hb) <= COUNTERS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_scores_the_largest_divisor_of_the_group_that_fits() {
        assert_eq!(heads_per_block(8), 8);
        assert_eq!(heads_per_block(3), 3);
        assert_eq!(heads_per_block(32), 16);
        assert_eq!(heads_per_block(24), 12);
        assert_eq!(heads_per_block(17), 1);
    }

    #[test]
    fn the_tensor_core_tiles_of_head_dim_128_fit_a_block_without_opting_in() {
        assert!(tensor_cores(DType::BF16, 128) && !tensor_cores(DType::F32, 64));
        assert!(
            !tensor_cores(DType::F16, 80),
            "80 dims are not whole n-tiles of four warps"
        );
        // 16 query rows of 136 BF16, 16 x 74 floats, 2 x 64 key/value rows of 136 BF16.
        assert_eq!(shared_bytes(8, 128, DType::BF16, true), 4352 + 4736 + 34816);
        assert!(shared_bytes(16, 128, DType::BF16, true) <= 48 << 10);
    }
}
