//! The products with AVX-512 (F, BW, VL) and VNNI: two blocks of 32 values per instruction,
//! `vpdpbusd` summing four byte products into each 32-bit lane. Blocks come in groups of eight
//! (their headers converted in one instruction), then pairs and single blocks.
#![cfg(target_arch = "x86_64")]

use super::avx2::{self, f16_at};
use super::{prefetch, F32Row, Q8Row, WeightRow, BLOCK};
use std::arch::x86_64::*;

/// Lane indices that broadcast lane `a` to lanes 0..8 and lane `b` to lanes 8..16: the two
/// scales of a pair of blocks.
#[target_feature(enable = "avx512f")]
unsafe fn pair(a: i32, b: i32) -> __m512i {
    _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b)
}

/// `a` in lanes 0..8 and `b` in lanes 8..16.
#[target_feature(enable = "avx512f")]
unsafe fn halves(a: f32, b: f32) -> __m512 {
    _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b))
}

/// Blocks `b` and `b + 1` of Q4_1 codes as 64 values 0..15, in the order of the activations:
/// each block's low nibbles (values 0..15), then its high ones (16..31).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q4_pair(codes: *const u8, b: usize) -> __m512i {
    let packed = _mm512_castsi256_si512(_mm256_loadu_si256(
        codes.add(b * BLOCK / 2) as *const __m256i
    ));
    // 128-bit lanes (b, b, b + 1, b + 1); the second of each shifted to its high nibbles.
    let spread = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), packed);
    let shifted = _mm512_srlv_epi64(spread, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    _mm512_and_si512(shifted, _mm512_set1_epi8(0x0f))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn dot_q4_1(w: &WeightRow, x: &Q8Row) -> f32 {
    let blocks = w.codes.len() / (BLOCK / 2);
    assert!(x.q.len() >= blocks * BLOCK && w.headers.len() >= blocks * 4);
    let (hp, cp, xq, ds) = (
        w.headers.as_ptr(),
        w.codes.as_ptr(),
        x.q.as_ptr(),
        x.ds.as_ptr(),
    );
    let mut acc = [_mm512_setzero_ps(); 2];
    // Lanes d·d_x (even) and m·s_x (odd) of every block; the odd ones are the offsets.
    let mut both = _mm512_setzero_ps();
    let mut b = 0;
    while b + 8 <= blocks {
        // Eight blocks' (d, m) against the row's (d_x, s_x).
        let dm = _mm512_cvtph_ps(_mm256_loadu_si256(hp.add(b * 4) as *const __m256i));
        let scaled = _mm512_mul_ps(dm, _mm512_loadu_ps(ds.add(b * 2)));
        both = _mm512_add_ps(both, scaled);
        prefetch(
            cp.wrapping_add(b * BLOCK / 2),
            hp.wrapping_add(b * 4),
            8 * BLOCK / 2,
            4,
        );
        for p in 0..4 {
            let xv = _mm512_loadu_si512(xq.add((b + 2 * p) * BLOCK) as *const __m512i);
            let ints = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q4_pair(cp, b + 2 * p), xv);
            let p = p as i32;
            let scale = _mm512_permutexvar_ps(pair(4 * p, 4 * p + 2), scaled);
            acc[p as usize & 1] =
                _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(ints), acc[p as usize & 1]);
        }
        b += 8;
    }
    let mut offsets = _mm512_mask_reduce_add_ps(0xaaaa, both);
    // Pairs left over (a row of 576 values ends in one), their scales converted one by one.
    while b + 2 <= blocks {
        let (d0, m0) = (f16_at(w.headers, b * 4), f16_at(w.headers, b * 4 + 2));
        let (d1, m1) = (f16_at(w.headers, b * 4 + 4), f16_at(w.headers, b * 4 + 6));
        let scale = halves(d0 * x.d[b], d1 * x.d[b + 1]);
        let xv = _mm512_loadu_si512(xq.add(b * BLOCK) as *const __m512i);
        let ints = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q4_pair(cp, b), xv);
        acc[0] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(ints), acc[0]);
        offsets += m0 * x.s(b) + m1 * x.s(b + 1);
        b += 2;
    }
    let rest = if b < blocks {
        avx2::dot_q4_1(w, x, b)
    } else {
        0.0
    };
    _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1])) + offsets + rest
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn dot_q8_0(w: &WeightRow, x: &Q8Row) -> f32 {
    let blocks = w.codes.len() / BLOCK;
    assert!(x.q.len() >= blocks * BLOCK && w.headers.len() >= blocks * 2);
    let (hp, cp, xq, xd) = (
        w.headers.as_ptr(),
        w.codes.as_ptr(),
        x.q.as_ptr(),
        x.d.as_ptr(),
    );
    let zero = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut b = 0;
    while b + 8 <= blocks {
        let d = _mm256_cvtph_ps(_mm_loadu_si128(hp.add(b * 2) as *const __m128i));
        let scales = _mm512_castps256_ps512(_mm256_mul_ps(d, _mm256_loadu_ps(xd.add(b))));
        prefetch(
            cp.wrapping_add(b * BLOCK),
            hp.wrapping_add(b * 2),
            8 * BLOCK,
            16,
        );
        for p in 0..4 {
            let wv = _mm512_loadu_si512(cp.add((b + 2 * p) * BLOCK) as *const __m512i);
            let xv = _mm512_loadu_si512(xq.add((b + 2 * p) * BLOCK) as *const __m512i);
            // vpdpbusd wants one unsigned side: |w| against x carrying w's sign (|w| of -128 is
            // 128 read unsigned; x is never -128, `quantize_row` rounds into -127..=127).
            let signed = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(wv), zero, xv);
            let ints = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(wv), signed);
            let p = p as i32;
            let scale = _mm512_permutexvar_ps(pair(2 * p, 2 * p + 1), scales);
            acc[p as usize & 1] =
                _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(ints), acc[p as usize & 1]);
        }
        b += 8;
    }
    while b + 2 <= blocks {
        let d0 = f16_at(w.headers, b * 2) * x.d[b];
        let d1 = f16_at(w.headers, b * 2 + 2) * x.d[b + 1];
        let wv = _mm512_loadu_si512(cp.add(b * BLOCK) as *const __m512i);
        let xv = _mm512_loadu_si512(xq.add(b * BLOCK) as *const __m512i);
        let signed = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(wv), zero, xv);
        let ints = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(wv), signed);
        acc[0] = _mm512_fmadd_ps(halves(d0, d1), _mm512_cvtepi32_ps(ints), acc[0]);
        b += 2;
    }
    let rest = if b < blocks {
        avx2::dot_q8_0(w, x, b)
    } else {
        0.0
    };
    _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1])) + rest
}

/// Σ over one block's 32 values (16 bytes each half, widened by `widen`) times `x`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn float_block(lo: __m512i, hi: __m512i, x: *const f32) -> __m512 {
    let sum = _mm512_mul_ps(_mm512_cvtepi32_ps(lo), _mm512_loadu_ps(x));
    _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_loadu_ps(x.add(16)), sum)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn dot_q8_0_f32(w: &WeightRow, x: &F32Row) -> f32 {
    let blocks = w.codes.len() / BLOCK;
    assert!(x.x.len() >= blocks * BLOCK && w.headers.len() >= blocks * 2);
    let (hp, cp, xp) = (w.headers.as_ptr(), w.codes.as_ptr(), x.x.as_ptr());
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut b = 0;
    while b + 8 <= blocks {
        let d = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(
            hp.add(b * 2) as *const __m128i
        )));
        prefetch(
            cp.wrapping_add(b * BLOCK),
            hp.wrapping_add(b * 2),
            8 * BLOCK,
            16,
        );
        for j in 0..8 {
            let codes = cp.add((b + j) * BLOCK);
            let lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(codes as *const __m128i));
            let hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(codes.add(16) as *const __m128i));
            let block = float_block(lo, hi, xp.add((b + j) * BLOCK));
            let scale = _mm512_permutexvar_ps(_mm512_set1_epi32(j as i32), d);
            acc[j & 1] = _mm512_fmadd_ps(scale, block, acc[j & 1]);
        }
        b += 8;
    }
    while b < blocks {
        let codes = cp.add(b * BLOCK);
        let lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(codes as *const __m128i));
        let hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(codes.add(16) as *const __m128i));
        let block = float_block(lo, hi, xp.add(b * BLOCK));
        acc[0] = _mm512_fmadd_ps(_mm512_set1_ps(f16_at(w.headers, b * 2)), block, acc[0]);
        b += 1;
    }
    _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn dot_q4_1_f32(w: &WeightRow, x: &F32Row) -> f32 {
    let blocks = w.codes.len() / (BLOCK / 2);
    assert!(x.x.len() >= blocks * BLOCK && w.headers.len() >= blocks * 4);
    let (hp, cp, xp, os) = (
        w.headers.as_ptr(),
        w.codes.as_ptr(),
        x.x.as_ptr(),
        x.one_sums.as_ptr(),
    );
    let mut acc = [_mm512_setzero_ps(); 2];
    // Lanes d (even) and m·Σx (odd) of every block; the odd ones are the offsets.
    let mut both = _mm512_setzero_ps();
    let low = _mm_set1_epi8(0x0f);
    let mut b = 0;
    while b + 8 <= blocks {
        let dm = _mm512_cvtph_ps(_mm256_loadu_si256(hp.add(b * 4) as *const __m256i));
        let scaled = _mm512_mul_ps(dm, _mm512_loadu_ps(os.add(b * 2)));
        prefetch(
            cp.wrapping_add(b * BLOCK / 2),
            hp.wrapping_add(b * 4),
            8 * BLOCK / 2,
            4,
        );
        both = _mm512_add_ps(both, scaled);
        for j in 0..8 {
            let packed = _mm_loadu_si128(cp.add((b + j) * BLOCK / 2) as *const __m128i);
            let lo = _mm512_cvtepu8_epi32(_mm_and_si128(packed, low));
            let hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(packed, 4), low));
            let block = float_block(lo, hi, xp.add((b + j) * BLOCK));
            let scale = _mm512_permutexvar_ps(_mm512_set1_epi32(2 * j as i32), scaled);
            acc[j & 1] = _mm512_fmadd_ps(scale, block, acc[j & 1]);
        }
        b += 8;
    }
    let mut offsets = _mm512_mask_reduce_add_ps(0xaaaa, both);
    while b < blocks {
        let (d, m) = (f16_at(w.headers, b * 4), f16_at(w.headers, b * 4 + 2));
        let packed = _mm_loadu_si128(cp.add(b * BLOCK / 2) as *const __m128i);
        let lo = _mm512_cvtepu8_epi32(_mm_and_si128(packed, low));
        let hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(packed, 4), low));
        let block = float_block(lo, hi, xp.add(b * BLOCK));
        acc[0] = _mm512_fmadd_ps(_mm512_set1_ps(d), block, acc[0]);
        offsets += m * x.one_sums[2 * b + 1];
        b += 1;
    }
    _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1])) + offsets
}
