//! Attention of one query per row and head over a key/value cache on the host, each row seeing
//! its own window of the cache: a decode step's attention, scored only over the keys in the
//! window (the composed product of the engine scored every slot of the cache and masked the
//! rest, and went through a GEMM, a softmax and a second GEMM per head, which took a sixth of a
//! CPU decode step of SmolLM2-135M at 200 tokens).

use super::simd::{isa, Isa};
use super::workers;
use crate::spec::AttentionSpec;
use crate::{Error, Result};

/// Σ a·b in eight independent lanes (so the compiler vectorizes it).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// out [batch, heads, 1, head_dim] = softmax(scale · q kᵀ) v for q [batch, heads, 1,
/// head_dim] and k, v [batch, kv_heads, tk, head_dim] (the cache's capacity), all contiguous,
/// over keys `first[b] ..= last[b]` of row b (clamped to the cache; a row whose window holds no
/// key gets zeros, as on CUDA). `last` holds one bound for every row or one per row.
pub fn decode_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    first: &[i64],
    last: &[i64],
    spec: &AttentionSpec,
) -> Result<Vec<f32>> {
    let AttentionSpec {
        batch,
        heads,
        kv_heads,
        tk: capacity,
        head_dim: hd,
        ..
    } = *spec;
    let scale = spec.scale as f32;
    let cache = batch * kv_heads * capacity * hd;
    if kv_heads == 0
        || !heads.is_multiple_of(kv_heads)
        || q.len() != batch * heads * hd
        || k.len() != cache
        || v.len() != cache
        || first.len() != batch
        || !(last.len() == 1 || last.len() == batch)
    {
        return Err(Error::invalid(
            "decode_attention",
            format!(
                "{spec:?} does not fit q of {}, k of {}, v of {} values and windows of {} and {}",
                q.len(),
                k.len(),
                v.len(),
                first.len(),
                last.len()
            ),
        ));
    }
    if hd == 0 {
        return Ok(Vec::new());
    }
    let window = Window {
        q,
        k,
        v,
        first,
        last,
        heads,
        group: heads / kv_heads,
        kv_heads,
        capacity,
        hd,
        scale,
    };
    let mut out = vec![0f32; batch * heads * hd];
    // One row per head; the heads are shared among threads.
    let shares = workers::Rows {
        len: hd,
        grain: 1,
        work: 2 * batch * heads * capacity * hd,
    };
    let avx2 = isa() >= Isa::Avx2;
    workers::for_each_rows(&mut out, shares, |first_row, rows| {
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: the CPU has AVX2 and FMA (`isa`).
            return unsafe { window.attend_avx2(first_row, rows) };
        }
        let _ = avx2;
        window.attend(first_row, rows)
    });
    Ok(out)
}

/// The operands and sizes of one call.
struct Window<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    first: &'a [i64],
    last: &'a [i64],
    heads: usize,
    group: usize,
    kv_heads: usize,
    capacity: usize,
    hd: usize,
    scale: f32,
}

impl Window<'_> {
    /// `attend` compiled for AVX2 and FMA: the same code, eight lanes wide.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn attend_avx2(&self, first_row: usize, rows: &mut [f32]) {
        self.attend(first_row, rows)
    }

    /// Rows `first_row ..` (one per batch row and head) into `rows`.
    #[inline(always)]
    fn attend(&self, first_row: usize, rows: &mut [f32]) {
        let hd = self.hd;
        let mut scores = Vec::with_capacity(self.capacity);
        for (i, o) in rows.chunks_exact_mut(hd).enumerate() {
            let row = first_row + i;
            let (b, h) = (row / self.heads, row % self.heads);
            let lo = self.first[b].max(0) as usize;
            let hi = self.last[b.min(self.last.len() - 1)].min(self.capacity as i64 - 1);
            if hi < lo as i64 {
                continue;
            }
            let hi = hi as usize;
            let base = (b * self.kv_heads + h / self.group) * self.capacity * hd;
            let qh = &self.q[row * hd..][..hd];
            scores.clear();
            // A plain loop: an iterator's closure would be compiled apart, without AVX2.
            for j in lo..=hi {
                scores.push(self.scale * dot(qh, &self.k[base + j * hd..][..hd]));
            }
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            for (j, p) in (lo..=hi).zip(&scores) {
                let p = p / sum;
                for (acc, x) in o.iter_mut().zip(&self.v[base + j * hd..][..hd]) {
                    *acc += p * x;
                }
            }
        }
    }
}
