//! One query per (row, head) against a key/value cache whose visible window is read from
//! device memory (kernels/decode_attention.cu): the keys are split into chunks scored by
//! separate blocks, and the last block of each (row, head group) merges them.

use super::compile::DECODE_ATTENTION;
use super::device::COUNTERS;
use super::launch::{args, type_suffix};
use super::CudaStorage;
use crate::spec::AttentionSpec;
use crate::{DType, Error, Result};

/// Keys a block scores; mirrors CHUNK in the kernel file.
const CHUNK: usize = 64;
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
    let sfx = type_suffix(dtype);
    let f = dev.function(&DECODE_ATTENTION, &format!("decode_attention_{sfx}"))?;
    let shared = shared_bytes(hb, hd, dtype) as u32;
    let at = |(s, offset): At| s.ptr_at(offset);
    let (pq, pk, pv, pf, pl) = (at(q), at(k), at(v), at(first), at(last));
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

/// Shared memory of a chunk block: the queries, scores and stats as floats (rounded up to 16
/// bytes), then the chunk's key and value rows in the cache's dtype.
fn shared_bytes(hb: usize, hd: usize, dtype: DType) -> usize {
    (hb * (hd + CHUNK + 2)).next_multiple_of(4) * 4 + 2 * CHUNK * hd * dtype.size_in_bytes()
}

/// Whether the kernels take this problem: even head dims whose chunk tiles fit the 48 KB of
/// shared memory a block has without opting in (BF16 up to 128, F32 up to 64), any grouping.
pub fn supports(spec: &AttentionSpec, dtype: DType) -> bool {
    let hb = spec
        .heads
        .checked_div(spec.kv_heads)
        .map_or(1, heads_per_block);
    shared_bytes(hb, spec.head_dim, dtype) <= 48 << 10
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
}
