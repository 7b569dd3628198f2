//! The products with AVX2, FMA and F16C: a block of 32 values per step. Each kernel sums the
//! row's blocks from `from` on (the AVX-512 kernels finish their rows' last odd blocks here).
//!
//! Headers are converted eight f16 at a time and multiplied by the row's scales in one vector;
//! each block's scale is then a lane broadcast, and two accumulators keep two blocks'
//! multiply-adds in flight.
#![cfg(target_arch = "x86_64")]

use super::{prefetch, F32Row, Q8Row, WeightRow, BLOCK};
use std::arch::x86_64::*;

/// The f16 at byte `at`, converted by the F16C instruction (the `half` crate's software
/// conversion cost a tenth of a decode step).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_at(b: &[u8], at: usize) -> f32 {
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

/// Block `b`'s 16 code bytes as its 32 values 0..15: byte j holds value j in its low nibble
/// and value j + 16 in its high one.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_values(codes: *const u8, b: usize) -> __m256i {
    let packed = _mm_loadu_si128(codes.add(b * BLOCK / 2) as *const __m128i);
    let low = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(packed, low);
    let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low);
    _mm256_set_m128i(hi, lo)
}

/// Block `b`'s 32 products of Q4_1 codes (without the offset) and the row's codes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1_products(codes: *const u8, xq: *const i8, b: usize) -> __m256 {
    let xq = _mm256_loadu_si256(xq.add(b * BLOCK) as *const __m256i);
    products(q4_values(codes, b), xq)
}

/// Σ over 32 values of `values` (bytes, signed or not as `signed` says) times `x`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn float_block(values: __m256i, signed: bool, x: *const f32) -> __m256 {
    let halves = [
        _mm256_castsi256_si128(values),
        _mm256_extracti128_si256(values, 1),
    ];
    let mut sum = _mm256_setzero_ps();
    for (h, half) in halves.into_iter().enumerate() {
        for q in 0..2 {
            let bytes = if q == 0 {
                half
            } else {
                _mm_srli_si128(half, 8)
            };
            let ints = if signed {
                _mm256_cvtepi8_epi32(bytes)
            } else {
                _mm256_cvtepu8_epi32(bytes)
            };
            let xs = _mm256_loadu_ps(x.add(16 * h + 8 * q));
            sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ints), xs, sum);
        }
    }
    sum
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_q8_0(w: &WeightRow, x: &Q8Row, from: usize) -> f32 {
    let blocks = w.codes.len() / BLOCK;
    assert!(x.q.len() >= blocks * BLOCK && w.headers.len() >= blocks * 2);
    let (hp, cp, xq, xd) = (
        w.headers.as_ptr(),
        w.codes.as_ptr(),
        x.q.as_ptr(),
        x.d.as_ptr(),
    );
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut b = from;
    while b + 8 <= blocks {
        let d = _mm256_cvtph_ps(_mm_loadu_si128(hp.add(b * 2) as *const __m128i));
        let scales = _mm256_mul_ps(d, _mm256_loadu_ps(xd.add(b)));
        prefetch(
            cp.wrapping_add(b * BLOCK),
            hp.wrapping_add(b * 2),
            8 * BLOCK,
            16,
        );
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
pub(super) unsafe fn dot_q4_1(w: &WeightRow, x: &Q8Row, from: usize) -> f32 {
    let blocks = w.codes.len() / (BLOCK / 2);
    assert!(x.q.len() >= blocks * BLOCK && w.headers.len() >= blocks * 4);
    let (hp, cp, xq, ds) = (
        w.headers.as_ptr(),
        w.codes.as_ptr(),
        x.q.as_ptr(),
        x.ds.as_ptr(),
    );
    let mut acc = [_mm256_setzero_ps(); 2];
    // Lanes d·d_x (even) and m·s_x (odd) of every block; the odd ones are the offsets.
    let mut both = _mm256_setzero_ps();
    let mut b = from;
    while b + 4 <= blocks {
        // Four blocks' (d, m) against the row's (d_x, s_x).
        let dm = _mm256_cvtph_ps(_mm_loadu_si128(hp.add(b * 4) as *const __m128i));
        let scaled = _mm256_mul_ps(dm, _mm256_loadu_ps(ds.add(b * 2)));
        prefetch(
            cp.wrapping_add(b * BLOCK / 2),
            hp.wrapping_add(b * 4),
            4 * BLOCK / 2,
            4,
        );
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
        offsets += m * x.s(b);
        b += 1;
    }
    hsum(_mm256_add_ps(acc[0], acc[1])) + offsets
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_q8_0_f32(w: &WeightRow, x: &F32Row, from: usize) -> f32 {
    let blocks = w.codes.len() / BLOCK;
    assert!(x.x.len() >= blocks * BLOCK && w.headers.len() >= blocks * 2);
    let (hp, cp, xp) = (w.headers.as_ptr(), w.codes.as_ptr(), x.x.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut b = from;
    while b + 8 <= blocks {
        let d = _mm256_cvtph_ps(_mm_loadu_si128(hp.add(b * 2) as *const __m128i));
        prefetch(
            cp.wrapping_add(b * BLOCK),
            hp.wrapping_add(b * 2),
            8 * BLOCK,
            16,
        );
        for j in 0..8 {
            let codes = _mm256_loadu_si256(cp.add((b + j) * BLOCK) as *const __m256i);
            let block = float_block(codes, true, xp.add((b + j) * BLOCK));
            let scale = _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(j as i32));
            acc[j & 1] = _mm256_fmadd_ps(scale, block, acc[j & 1]);
        }
        b += 8;
    }
    while b < blocks {
        let codes = _mm256_loadu_si256(cp.add(b * BLOCK) as *const __m256i);
        let block = float_block(codes, true, xp.add(b * BLOCK));
        acc[0] = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(w.headers, b * 2)), block, acc[0]);
        b += 1;
    }
    hsum(_mm256_add_ps(acc[0], acc[1]))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_q4_1_f32(w: &WeightRow, x: &F32Row, from: usize) -> f32 {
    let blocks = w.codes.len() / (BLOCK / 2);
    assert!(x.x.len() >= blocks * BLOCK && w.headers.len() >= blocks * 4);
    let (hp, cp, xp, os) = (
        w.headers.as_ptr(),
        w.codes.as_ptr(),
        x.x.as_ptr(),
        x.one_sums.as_ptr(),
    );
    let mut acc = [_mm256_setzero_ps(); 2];
    // Lanes d (even) and m·Σx (odd) of every block; the odd ones are the offsets.
    let mut both = _mm256_setzero_ps();
    let mut b = from;
    while b + 4 <= blocks {
        let dm = _mm256_cvtph_ps(_mm_loadu_si128(hp.add(b * 4) as *const __m128i));
        let scaled = _mm256_mul_ps(dm, _mm256_loadu_ps(os.add(b * 2)));
        prefetch(
            cp.wrapping_add(b * BLOCK / 2),
            hp.wrapping_add(b * 4),
            4 * BLOCK / 2,
            4,
        );
        both = _mm256_add_ps(both, scaled);
        for j in 0..4 {
            let block = float_block(q4_values(cp, b + j), false, xp.add((b + j) * BLOCK));
            let scale = _mm256_permutevar8x32_ps(scaled, _mm256_set1_epi32(2 * j as i32));
            acc[j & 1] = _mm256_fmadd_ps(scale, block, acc[j & 1]);
        }
        b += 4;
    }
    let odd = _mm256_castsi256_ps(_mm256_setr_epi32(0, -1, 0, -1, 0, -1, 0, -1));
    let mut offsets = hsum(_mm256_and_ps(both, odd));
    while b < blocks {
        let (d, m) = (f16_at(w.headers, b * 4), f16_at(w.headers, b * 4 + 2));
        let block = float_block(q4_values(cp, b), false, xp.add(b * BLOCK));
        acc[0] = _mm256_fmadd_ps(_mm256_set1_ps(d), block, acc[0]);
        offsets += m * x.one_sums[2 * b + 1];
        b += 1;
    }
    hsum(_mm256_add_ps(acc[0], acc[1])) + offsets
}
