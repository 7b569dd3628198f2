//! Dequantization of ggml's block formats to f32, one function per block layout (ggml's
//! `block_q4_0`, `block_q4_K`, ...). Each follows the reference dequantization of ggml's
//! `ggml-quants.c` operation for operation (the same products in the same order, no fused
//! multiply-add), so the f32 results equal ggml's and the `gguf` Python package's bit for bit.
//!
//! Layouts (little-endian; `f16` is an IEEE half; a block of 32 values unless noted):
//! - Q8_0: f16 d, 32 x i8 q; x = q * d.
//! - Q4_0: f16 d, 16 bytes of nibbles; value j is the low nibble of byte j, value j + 16 the high
//!   nibble; x = (q - 8) * d.
//! - Q4_1: f16 d, f16 m, nibbles as Q4_0; x = q * d + m.
//! - Q5_0 / Q5_1: as Q4_0 / Q4_1 with a u32 of fifth bits after the scales (bit j for value j);
//!   x = (q - 16) * d, or x = q * d + m.
//! - Q4_K (256 values): f16 d, f16 dmin, 12 bytes of eight 6-bit scales and mins, 128 bytes of
//!   nibbles; each 64 values use two scale/min pairs: x = (d * sc) * q - dmin * m.
//! - Q5_K (256): as Q4_K with 32 bytes of fifth bits before the nibbles (bit i of byte l for
//!   value l of the i-th group of 32).
//! - Q6_K (256): 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 x i8 scales (one per
//!   16 values), f16 d; x = (d * scale) * (q - 32).

use crate::spec::ggml::{self as ty, GgmlType, QK_K};
use crate::{Error, Result};
use half::{bf16, f16};
use rayon::prelude::*;

/// The types `dequantize` reads.
pub const SUPPORTED: &[GgmlType] = &[
    ty::F32,
    ty::F16,
    ty::BF16,
    ty::Q8_0,
    ty::Q4_0,
    ty::Q4_1,
    ty::Q5_0,
    ty::Q5_1,
    ty::Q4_K,
    ty::Q5_K,
    ty::Q6_K,
];

pub fn can_dequantize(t: GgmlType) -> bool {
    SUPPORTED.contains(&t)
}

/// Blocks handed to one rayon task: large enough that scheduling costs nothing beside them.
const BLOCKS_PER_TASK: usize = 512;

/// The f32 values of `bytes`, whole blocks of type `t`. The length must be a whole number of
/// blocks (the reader checks it against the tensor's shape first).
pub fn dequantize(t: GgmlType, bytes: &[u8]) -> Result<Vec<f32>> {
    let block = match t.code {
        0 => f32_block as BlockFn,
        1 => f16_block,
        30 => bf16_block,
        8 => q8_0_block,
        2 => q4_0_block,
        3 => q4_1_block,
        6 => q5_0_block,
        7 => q5_1_block,
        12 => q4_k_block,
        13 => q5_k_block,
        14 => q6_k_block,
        _ => {
            let names: Vec<&str> = SUPPORTED.iter().map(|t| t.name).collect();
            return Err(Error::invalid(
                "gguf dequantize",
                format!(
                    "type {t} is not supported (supported: {})",
                    names.join(", ")
                ),
            ));
        }
    };
    let (bs, ts) = (t.block_size as usize, t.type_size as usize);
    if !bytes.len().is_multiple_of(ts) {
        return Err(Error::invalid(
            "gguf dequantize",
            format!(
                "{} bytes are not whole {t} blocks of {ts} bytes",
                bytes.len()
            ),
        ));
    }
    let mut out = vec![0f32; bytes.len() / ts * bs];
    out.par_chunks_mut(bs * BLOCKS_PER_TASK)
        .zip(bytes.par_chunks(ts * BLOCKS_PER_TASK))
        .for_each(|(out, bytes)| {
            for (o, b) in out.chunks_exact_mut(bs).zip(bytes.chunks_exact(ts)) {
                block(b, o);
            }
        });
    Ok(out)
}

/// Dequantizes one block: `b` holds exactly one block's bytes, `out` its values.
type BlockFn = fn(&[u8], &mut [f32]);

/// The little-endian f16 at byte `at`.
pub(super) fn half(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

fn f32_block(b: &[u8], out: &mut [f32]) {
    out[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
}

fn f16_block(b: &[u8], out: &mut [f32]) {
    out[0] = half(b, 0);
}

fn bf16_block(b: &[u8], out: &mut [f32]) {
    out[0] = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
}

fn q8_0_block(b: &[u8], out: &mut [f32]) {
    let d = half(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[2..34]) {
        *o = (q as i8) as f32 * d;
    }
}

fn q4_0_block(b: &[u8], out: &mut [f32]) {
    let d = half(b, 0);
    let (lo, hi) = out.split_at_mut(16);
    for (j, &q) in b[2..18].iter().enumerate() {
        lo[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
        hi[j] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

fn q4_1_block(b: &[u8], out: &mut [f32]) {
    let (d, m) = (half(b, 0), half(b, 2));
    let (lo, hi) = out.split_at_mut(16);
    for (j, &q) in b[4..20].iter().enumerate() {
        lo[j] = (q & 0x0F) as f32 * d + m;
        hi[j] = (q >> 4) as f32 * d + m;
    }
}

/// The 5-bit values of a Q5 block: nibbles `qs` with fifth bits `qh` (bit j for value j).
fn five_bit(qh: u32, qs: &[u8], j: usize) -> (i32, i32) {
    let lo = (qs[j] & 0x0F) as u32 | ((qh >> j) & 1) << 4;
    let hi = (qs[j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
    (lo as i32, hi as i32)
}

fn q5_0_block(b: &[u8], out: &mut [f32]) {
    let d = half(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let (lo, hi) = out.split_at_mut(16);
    for j in 0..16 {
        let (x0, x1) = five_bit(qh, &b[6..22], j);
        lo[j] = (x0 - 16) as f32 * d;
        hi[j] = (x1 - 16) as f32 * d;
    }
}

fn q5_1_block(b: &[u8], out: &mut [f32]) {
    let (d, m) = (half(b, 0), half(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let (lo, hi) = out.split_at_mut(16);
    for j in 0..16 {
        let (x0, x1) = five_bit(qh, &b[8..24], j);
        lo[j] = x0 as f32 * d + m;
        hi[j] = x1 as f32 * d + m;
    }
}

/// Scale and min `j` (0..8) of a K-quant super-block, 6 bits each, packed in 12 bytes: the first
/// four pairs in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); the last four take their
/// low 4 bits from bytes 8-11 and their top 2 bits from the spare top bits of bytes 0-7.
fn k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        let sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        let m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        (sc, m)
    }
}

fn q4_k_block(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (half(b, 0), half(b, 2));
    let scales = &b[4..16];
    let qs = &b[16..16 + QK_K as usize / 2];
    for (chunk, (out, q)) in out
        .chunks_exact_mut(64)
        .zip(qs.chunks_exact(32))
        .enumerate()
    {
        let (sc1, m1) = k_scale_min(2 * chunk, scales);
        let (sc2, m2) = k_scale_min(2 * chunk + 1, scales);
        let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, min2) = (d * sc2 as f32, dmin * m2 as f32);
        let (lo, hi) = out.split_at_mut(32);
        for l in 0..32 {
            lo[l] = d1 * (q[l] & 0x0F) as f32 - min1;
            hi[l] = d2 * (q[l] >> 4) as f32 - min2;
        }
    }
}

fn q5_k_block(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (half(b, 0), half(b, 2));
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..48 + QK_K as usize / 2];
    for (chunk, (out, q)) in out
        .chunks_exact_mut(64)
        .zip(qs.chunks_exact(32))
        .enumerate()
    {
        let (sc1, m1) = k_scale_min(2 * chunk, scales);
        let (sc2, m2) = k_scale_min(2 * chunk + 1, scales);
        let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, min2) = (d * sc2 as f32, dmin * m2 as f32);
        let (bit1, bit2) = (1u8 << (2 * chunk), 1u8 << (2 * chunk + 1));
        let (lo, hi) = out.split_at_mut(32);
        for l in 0..32 {
            let high1 = if qh[l] & bit1 != 0 { 16 } else { 0 };
            let high2 = if qh[l] & bit2 != 0 { 16 } else { 0 };
            lo[l] = d1 * ((q[l] & 0x0F) + high1) as f32 - min1;
            hi[l] = d2 * ((q[l] >> 4) + high2) as f32 - min2;
        }
    }
}

fn q6_k_block(b: &[u8], out: &mut [f32]) {
    let ql_all = &b[0..128];
    let qh_all = &b[128..192];
    let scales = &b[192..208];
    let d = half(b, 208);
    // Two halves of 128 values, each from 64 bytes of low nibbles, 32 bytes of high bits and
    // 8 scales; within a half, four runs of 32 values.
    for half_i in 0..2 {
        let ql = &ql_all[64 * half_i..64 * half_i + 64];
        let qh = &qh_all[32 * half_i..32 * half_i + 32];
        let sc = &scales[8 * half_i..8 * half_i + 8];
        let out = &mut out[128 * half_i..128 * half_i + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            let scale = |k: usize| d * (sc[is + k] as i8) as f32;
            out[l] = scale(0) * q1 as f32;
            out[l + 32] = scale(2) * q2 as f32;
            out[l + 64] = scale(4) * q3 as f32;
            out[l + 96] = scale(6) * q4 as f32;
        }
    }
}
