//! Products of a few activation rows with a weight kept in ggml blocks, on the host, reading
//! the blocks where they lie (the kernels' split layout, `cuda::quant_matmul::split`) instead
//! of a dense copy: a decode step reads a quarter (Q4_1) or about half (Q8_0) of F16's bytes.
//!
//! As llama.cpp does, each activation row is first quantized to 8-bit blocks of 32 (a scale,
//! and for Q4_1 the sum the weights' offset multiplies), so a block's dot product is integer
//! multiply-adds and one scale: Q8_0 · Q8_0 is d_w·d_x·Σ w·x, Q4_1 · Q8_1 is
//! d_w·d_x·Σ q·x + m_w·s_x. With AVX2 and FMA (the development and CI machines') 32 products
//! are two instructions (`vpmaddubsw`, `vpmaddwd`); elsewhere the same integers in scalar
//! code. Rows are shared among rayon's threads.

use super::quants::half as f16_at;
use crate::cuda::quant_matmul::{codes_offset, BlockFormat};
use crate::{Error, Result};
use half::f16;
use rayon::prelude::*;

/// Values per block of the formats read here (and of the activations' 8-bit blocks).
const BLOCK: usize = 32;

/// Output rows one task computes: enough to amortise the task, few enough to share rows of a
/// small matrix among every core.
const ROWS_PER_TASK: usize = 16;

/// Weight values times rows below which a product runs on the calling thread.
const PARALLEL_VALUES: usize = 1 << 19;

/// Whether `quant_gemv` reads this format.
pub fn reads(format: BlockFormat) -> bool {
    matches!(format, BlockFormat::Q8_0 | BlockFormat::Q4_1)
}

/// One activation row as 8-bit blocks: per block a scale `d` (rounded through f16 as ggml
/// stores it), the block's sum `s` = d·Σq (Q4_1's offset multiplies it), and 32 codes.
struct Q8Row {
    d: Vec<f32>,
    s: Vec<f32>,
    /// `d` and `s` interleaved, as Q4_1's headers interleave d and m.
    ds: Vec<f32>,
    q: Vec<i8>,
}

fn f16_round(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

fn quantize_row(x: &[f32]) -> Q8Row {
    let blocks = x.len() / BLOCK;
    let mut row = Q8Row {
        d: Vec::with_capacity(blocks),
        s: Vec::with_capacity(blocks),
        ds: Vec::with_capacity(2 * blocks),
        q: vec![0; x.len()],
    };
    for (values, codes) in x.chunks_exact(BLOCK).zip(row.q.chunks_exact_mut(BLOCK)) {
        let amax = values.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let inverse = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (c, v) in codes.iter_mut().zip(values) {
            *c = (v * inverse).round() as i8;
            sum += *c as i32;
        }
        row.d.push(f16_round(d));
        row.s.push(f16_round(sum as f32 * d));
    }
    row.ds = row
        .d
        .iter()
        .zip(&row.s)
        .flat_map(|(&d, &s)| [d, s])
        .collect();
    row
}

/// The blocks of one weight row: per block its f16 header words and its codes.
struct WeightRow<'a> {
    headers: &'a [u8],
    codes: &'a [u8],
}

/// An [n, k] matrix stored split (every block's header, then every block's codes), read by rows.
struct WeightRows<'a> {
    headers: &'a [u8],
    codes: &'a [u8],
    /// Header and code bytes of one row.
    row_headers: usize,
    row_codes: usize,
}

impl<'a> WeightRows<'a> {
    /// `stored`, of `format.stored_bytes(n, k)` bytes (checked by the caller).
    fn new(format: BlockFormat, stored: &'a [u8], [n, k]: [usize; 2]) -> Self {
        // As `stored_bytes` counts them: a format without split headers moves none.
        let header = format.split_header().unwrap_or(0);
        let blocks = k / format.block_values();
        let (headers, codes) = stored.split_at(codes_offset(n * blocks * header));
        WeightRows {
            headers,
            codes,
            row_headers: blocks * header,
            row_codes: blocks * (format.block_bytes() - header),
        }
    }

    fn row(&self, r: usize) -> WeightRow<'a> {
        WeightRow {
            headers: &self.headers[r * self.row_headers..][..self.row_headers],
            codes: &self.codes[r * self.row_codes..][..self.row_codes],
        }
    }
}

/// Σ over a row's blocks for the format, in f32.
fn dot(format: BlockFormat, w: &WeightRow, x: &Q8Row) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
        return unsafe {
            match format {
                BlockFormat::Q8_0 => x86::dot_q8_0(w, x),
                _ => x86::dot_q4_1(w, x),
            }
        };
    }
    match format {
        BlockFormat::Q8_0 => dot_q8_0_scalar(w, x),
        _ => dot_q4_1_scalar(w, x),
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        std::env::var("RB_CPU_SIMD").as_deref() != Ok("0")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

fn dot_q8_0_scalar(w: &WeightRow, x: &Q8Row) -> f32 {
    let mut sum = 0f32;
    for (b, codes) in w.codes.chunks_exact(BLOCK).enumerate() {
        let xq = &x.q[b * BLOCK..][..BLOCK];
        let ints: i32 = codes
            .iter()
            .zip(xq)
            .map(|(&c, &q)| c as i8 as i32 * q as i32)
            .sum();
        sum += f16_at(w.headers, b * 2) * x.d[b] * ints as f32;
    }
    sum
}

fn dot_q4_1_scalar(w: &WeightRow, x: &Q8Row) -> f32 {
    let mut sum = 0f32;
    for (b, codes) in w.codes.chunks_exact(BLOCK / 2).enumerate() {
        let xq = &x.q[b * BLOCK..][..BLOCK];
        let mut ints = 0i32;
        for (j, &c) in codes.iter().enumerate() {
            ints += (c & 0x0f) as i32 * xq[j] as i32 + (c >> 4) as i32 * xq[j + BLOCK / 2] as i32;
        }
        let (d, m) = (f16_at(w.headers, b * 4), f16_at(w.headers, b * 4 + 2));
        sum += d * x.d[b] * ints as f32 + m * x.s[b];
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Q8Row, WeightRow, BLOCK};
    use std::arch::x86_64::*;

    /// The f16 at byte `at`, converted by the F16C instruction (the `half` crate's software
    /// conversion cost a tenth of a decode step).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn f16_at(b: &[u8], at: usize) -> f32 {
        let bits = u16::from_le_bytes([b[at], b[at + 1]]) as i32;
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Σ of 32 products of unsigned bytes `u` and signed bytes `s`, as 8 f32 lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn products(u: __m256i, s: __m256i) -> __m256 {
        let pairs = _mm256_maddubs_epi16(u, s);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    /// Block `b`'s 32 products of Q8_0 codes and the row's codes, as 8 f32 lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q8_0_products(codes: *const u8, xq: *const i8, b: usize) -> __m256 {
        let wq = _mm256_loadu_si256(codes.add(b * BLOCK) as *const __m256i);
        let xq = _mm256_loadu_si256(xq.add(b * BLOCK) as *const __m256i);
        // maddubs wants one unsigned side: |w| against x carrying w's sign.
        products(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xq, wq))
    }

    /// Block `b`'s 32 products of Q4_1 codes (without the offset) and the row's codes.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4_1_products(codes: *const u8, xq: *const i8, b: usize) -> __m256 {
        let packed = _mm_loadu_si128(codes.add(b * BLOCK / 2) as *const __m128i);
        // Byte j holds value j in its low nibble and value j + 16 in its high one.
        let low = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(packed, low);
        let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low);
        let xq = _mm256_loadu_si256(xq.add(b * BLOCK) as *const __m256i);
        products(_mm256_set_m128i(hi, lo), xq)
    }

    // Headers are converted eight f16 at a time and multiplied by the row's scales in one
    // vector; each block's scale is then a lane broadcast, and two accumulators keep two
    // blocks' multiply-adds in flight.

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_q8_0(w: &WeightRow, x: &Q8Row) -> f32 {
        let blocks = w.codes.len() / BLOCK;
        let (hp, cp, xq, xd) = (
            w.headers.as_ptr(),
            w.codes.as_ptr(),
            x.q.as_ptr(),
            x.d.as_ptr(),
        );
        let mut acc = [_mm256_setzero_ps(); 2];
        let mut b = 0;
        while b + 8 <= blocks {
            let d = _mm256_cvtph_ps(_mm_loadu_si128(hp.add(b * 2) as *const __m128i));
            let scales = _mm256_mul_ps(d, _mm256_loadu_ps(xd.add(b)));
            for j in 0..8 {
                let scale = _mm256_permutevar8x32_ps(scales, _mm256_set1_epi32(j as i32));
                acc[j & 1] = _mm256_fmadd_ps(scale, q8_0_products(cp, xq, b + j), acc[j & 1]);
            }
            b += 8;
        }
        while b < blocks {
            let scale = _mm256_set1_ps(f16_at(w.headers, b * 2) * x.d[b]);
            acc[0] = _mm256_fmadd_ps(scale, q8_0_products(cp, xq, b), acc[0]);
            b += 1;
        }
        hsum(_mm256_add_ps(acc[0], acc[1]))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_q4_1(w: &WeightRow, x: &Q8Row) -> f32 {
        let blocks = w.codes.len() / (BLOCK / 2);
        let (hp, cp, xq, ds) = (
            w.headers.as_ptr(),
            w.codes.as_ptr(),
            x.q.as_ptr(),
            x.ds.as_ptr(),
        );
        let mut acc = [_mm256_setzero_ps(); 2];
        // Lanes d·d_x (even) and m·s_x (odd) of every block; the odd ones are the offsets.
        let mut both = _mm256_setzero_ps();
        let mut b = 0;
        while b + 4 <= blocks {
            // Four blocks' (d, m) against the row's (d_x, s_x).
            let dm = _mm256_cvtph_ps(_mm_loadu_si128(hp.add(b * 4) as *const __m128i));
            let scaled = _mm256_mul_ps(dm, _mm256_loadu_ps(ds.add(b * 2)));
            both = _mm256_add_ps(both, scaled);
            for j in 0..4 {
                let scale = _mm256_permutevar8x32_ps(scaled, _mm256_set1_epi32(2 * j as i32));
                acc[j & 1] = _mm256_fmadd_ps(scale, q4_1_products(cp, xq, b + j), acc[j & 1]);
            }
            b += 4;
        }
        let odd = _mm256_castsi256_ps(_mm256_setr_epi32(0, -1, 0, -1, 0, -1, 0, -1));
        let mut offsets = hsum(_mm256_and_ps(both, odd));
        while b < blocks {
            let (d, m) = (f16_at(w.headers, b * 4), f16_at(w.headers, b * 4 + 2));
            let scale = _mm256_set1_ps(d * x.d[b]);
            acc[0] = _mm256_fmadd_ps(scale, q4_1_products(cp, xq, b), acc[0]);
            offsets += m * x.s[b];
            b += 1;
        }
        hsum(_mm256_add_ps(acc[0], acc[1])) + offsets
    }
}

/// y [m, n] = x [m, k] · Wᵀ for W [n, k] stored split in `format` (`stored`, the kernels'
/// layout), x row-major f32. `k` must be a whole number of 32-value blocks.
pub fn quant_gemv(
    format: BlockFormat,
    stored: &[u8],
    [n, k]: [usize; 2],
    x: &[f32],
    m: usize,
) -> Result<Vec<f32>> {
    let op = "quantized matmul";
    if !reads(format) {
        return Err(Error::invalid(
            op,
            format!(
                "the CPU product reads Q8_0 and Q4_1 blocks, not {}",
                format.name()
            ),
        ));
    }
    if !k.is_multiple_of(BLOCK) || x.len() != m * k || stored.len() != format.stored_bytes(n, k)? {
        return Err(Error::invalid(
            op,
            format!(
                "a {n}×{k} {} weight ({} bytes stored) times {m} rows of {k}: got {} bytes and {} values",
                format.name(),
                format.stored_bytes(n, k)?,
                stored.len(),
                x.len()
            ),
        ));
    }
    let weights = WeightRows::new(format, stored, [n, k]);
    let rows: Vec<Q8Row> = x.chunks_exact(k).map(quantize_row).collect();
    // Computed as [n, m] so each task writes whole output rows of W, then transposed.
    let mut by_weight_row = vec![0f32; n * m];
    let task = |(t, out): (usize, &mut [f32])| {
        for (i, y) in out.chunks_exact_mut(m.max(1)).enumerate() {
            let w = weights.row(t * ROWS_PER_TASK + i);
            for (yi, xr) in y.iter_mut().zip(&rows) {
                *yi = dot(format, &w, xr);
            }
        }
    };
    let chunks = ROWS_PER_TASK * m.max(1);
    // One thread, or a small matrix: no hand-off to rayon's workers and back (waking a sleeping
    // worker costs more than such a product).
    if rayon::current_num_threads() == 1 || n * k * m < PARALLEL_VALUES {
        by_weight_row.chunks_mut(chunks).enumerate().for_each(task);
    } else {
        by_weight_row
            .par_chunks_mut(chunks)
            .enumerate()
            .for_each(task);
    }
    let mut y = vec![0f32; m * n];
    for (r, values) in by_weight_row.chunks_exact(m.max(1)).enumerate() {
        for (i, v) in values.iter().enumerate().take(m) {
            y[i * n + r] = *v;
        }
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ggml::{quantize, quants};
    use crate::cuda::quant_matmul::split;
    use crate::spec::ggml::{self as ty, GgmlType};

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8;
                (h % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// The product against the dense product of the dequantized weight and the activations
    /// as quantized here: the same integers, so only f32 rounding apart.
    fn check(format: BlockFormat, t: GgmlType) {
        // 19 blocks a row: the SIMD loops' groups of 4 and 8 blocks and their remainders.
        let (n, k, m) = (37, 608, 3);
        let w = values(n * k, 1);
        let file = quantize::quantize(t, &w).unwrap();
        let dense = quants::dequantize(t, &file).unwrap();
        let stored = split(format, &file, [n, k]).unwrap();
        let x = values(m * k, 7);
        let got = quant_gemv(format, &stored, [n, k], &x, m).unwrap();
        for i in 0..m {
            let q = quantize_row(&x[i * k..][..k]);
            let xq: Vec<f32> = (0..k).map(|j| q.q[j] as f32 * q.d[j / BLOCK]).collect();
            for r in 0..n {
                let want: f32 = (0..k).map(|j| dense[r * k + j] * xq[j]).sum();
                let g = got[i * n + r];
                assert!(
                    (g - want).abs() <= 2e-3 * (1.0 + want.abs()),
                    "{} row {i} col {r}: {g} vs {want}",
                    format.name()
                );
            }
        }
    }

    #[test]
    fn q8_0_blocks_multiply_as_their_dequantized_weights() {
        check(BlockFormat::Q8_0, ty::Q8_0);
    }

    #[test]
    fn q4_1_blocks_multiply_as_their_dequantized_weights() {
        check(BlockFormat::Q4_1, ty::Q4_1);
    }

    #[test]
    fn the_simd_and_scalar_sums_agree() {
        let (n, k) = (5, 608);
        for (format, t) in [(BlockFormat::Q8_0, ty::Q8_0), (BlockFormat::Q4_1, ty::Q4_1)] {
            let file = quantize::quantize(t, &values(n * k, 3)).unwrap();
            let stored = split(format, &file, [n, k]).unwrap();
            let rows = WeightRows::new(format, &stored, [n, k]);
            let x = quantize_row(&values(k, 11));
            for r in 0..n {
                let w = rows.row(r);
                let scalar = match format {
                    BlockFormat::Q8_0 => dot_q8_0_scalar(&w, &x),
                    _ => dot_q4_1_scalar(&w, &x),
                };
                let any = dot(format, &w, &x);
                assert!(
                    (any - scalar).abs() <= 1e-4 * (1.0 + scalar.abs()),
                    "{any} vs {scalar}"
                );
            }
        }
    }

    #[test]
    fn a_weight_of_the_wrong_size_is_refused() {
        let err = quant_gemv(BlockFormat::Q4_1, &[0u8; 10], [2, 32], &[0.0; 32], 1).unwrap_err();
        assert!(err.to_string().contains("2×32 Q4_1"), "{err}");
    }
}
