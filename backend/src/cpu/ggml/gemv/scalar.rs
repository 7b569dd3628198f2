//! The products in plain code: the reference the SIMD kernels are tested against, and the path
//! of a CPU without AVX2.

use super::{F32Row, Q8Row, WeightRow, BLOCK};
use crate::cpu::ggml::quants::half;

pub(super) fn dot_q8_0(w: &WeightRow, x: &Q8Row) -> f32 {
    let mut sum = 0f32;
    for (b, codes) in w.codes.chunks_exact(BLOCK).enumerate() {
        let xq = &x.q[b * BLOCK..][..BLOCK];
        let ints: i32 = codes
            .iter()
            .zip(xq)
            .map(|(&c, &q)| c as i8 as i32 * q as i32)
            .sum();
        sum += half(w.headers, b * 2) * x.d[b] * ints as f32;
    }
    sum
}

pub(super) fn dot_q4_1(w: &WeightRow, x: &Q8Row) -> f32 {
    let mut sum = 0f32;
    for (b, codes) in w.codes.chunks_exact(BLOCK / 2).enumerate() {
        let xq = &x.q[b * BLOCK..][..BLOCK];
        let mut ints = 0i32;
        for (j, &c) in codes.iter().enumerate() {
            ints += (c & 0x0f) as i32 * xq[j] as i32 + (c >> 4) as i32 * xq[j + BLOCK / 2] as i32;
        }
        let (d, m) = (half(w.headers, b * 4), half(w.headers, b * 4 + 2));
        sum += d * x.d[b] * ints as f32 + m * x.s(b);
    }
    sum
}

pub(super) fn dot_q8_0_f32(w: &WeightRow, x: &F32Row) -> f32 {
    let mut sum = 0f32;
    for (b, codes) in w.codes.chunks_exact(BLOCK).enumerate() {
        let xs = &x.x[b * BLOCK..][..BLOCK];
        let block: f32 = codes
            .iter()
            .zip(xs)
            .map(|(&c, &v)| c as i8 as f32 * v)
            .sum();
        sum += half(w.headers, b * 2) * block;
    }
    sum
}

pub(super) fn dot_q4_1_f32(w: &WeightRow, x: &F32Row) -> f32 {
    let mut sum = 0f32;
    for (b, codes) in w.codes.chunks_exact(BLOCK / 2).enumerate() {
        let xs = &x.x[b * BLOCK..][..BLOCK];
        let mut block = 0f32;
        for (j, &c) in codes.iter().enumerate() {
            block += (c & 0x0f) as f32 * xs[j] + (c >> 4) as f32 * xs[j + BLOCK / 2];
        }
        let (d, m) = (half(w.headers, b * 4), half(w.headers, b * 4 + 2));
        sum += d * block + m * x.one_sums[2 * b + 1];
    }
    sum
}
