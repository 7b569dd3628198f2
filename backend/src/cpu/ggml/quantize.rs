//! Quantization of f32 values to ggml's block formats, the inverse of `quants`: F32, F16, BF16,
//! Q8_0, Q4_0, Q4_1, Q5_0 and Q4_K. Each follows ggml's reference quantizer (`quantize_row_*_ref` in
//! `ggml-quants.c`, which llama.cpp's `llama-quantize` runs when no importance matrix is
//! given) rule for rule, in f32 arithmetic, so a tensor quantizes to the same bytes:
//!
//! - F16 / BF16: round to nearest even (BF16 keeps a NaN quiet, as `ggml_compute_fp32_to_bf16`).
//! - Q8_0: d = absmax / 127, q = round(x / d) (halves away from zero), x = q * d.
//! - Q4_0: m = the value of largest magnitude (its sign kept), d = m / -8,
//!   q = min(15, trunc(x / d + 8.5)), x = (q - 8) * d. Q5_0 is the same with 16 and 31.
//! - Q4_1: m = the block's min, d = (max - min) / 15, q = min(15, trunc((x - m) / d + 0.5)),
//!   x = q * d + m.
//! - Q4_K: a super-block of 256 values is 8 sub-blocks of 32. Each sub-block gets a scale and a
//!   min from `make_qkx2_quants` (a weighted least-squares search over 21 candidate scales,
//!   weights = rms of the sub-block + |x|); the 8 scales and 8 mins are then quantized to
//!   6 bits against the super-block's largest (d = max_scale / 63, dmin = max_min / 63), and
//!   the 4-bit values are recomputed from the 6-bit scales actually stored.
//!
//! The length must be a whole number of blocks; which type a tensor of a given shape gets is
//! the exporter's choice (`storage_type`).

use crate::spec::ggml::{self as ty, GgmlType, QK_K};
use crate::{Error, Result};
use half::{bf16, f16};
use rayon::prelude::*;

/// The types `quantize` writes.
pub const QUANTIZABLE: &[GgmlType] = &[
    ty::F32,
    ty::F16,
    ty::BF16,
    ty::Q8_0,
    ty::Q4_0,
    ty::Q4_1,
    ty::Q5_0,
    ty::Q4_K,
];

/// Blocks handed to one rayon task.
const BLOCKS_PER_TASK: usize = 256;

/// The bytes of `values` stored as `t`.
pub fn quantize(t: GgmlType, values: &[f32]) -> Result<Vec<u8>> {
    let block: fn(&[f32], &mut [u8]) = match t.code {
        0 => |x, out| out.copy_from_slice(&x[0].to_le_bytes()),
        1 => |x, out| out.copy_from_slice(&f16::from_f32(x[0]).to_bits().to_le_bytes()),
        30 => |x, out| out.copy_from_slice(&to_bf16(x[0]).to_le_bytes()),
        8 => q8_0_block,
        2 => q4_0_block,
        3 => q4_1_block,
        6 => q5_0_block,
        12 => q4_k_block,
        _ => {
            let names: Vec<&str> = QUANTIZABLE.iter().map(|t| t.name).collect();
            return Err(Error::invalid(
                "gguf quantize",
                format!(
                    "writing {t} is not supported (supported: {})",
                    names.join(", ")
                ),
            ));
        }
    };
    let (bs, ts) = (t.block_size as usize, t.type_size as usize);
    if !values.len().is_multiple_of(bs) {
        return Err(Error::invalid(
            "gguf quantize",
            format!("{} values are not whole {t} blocks of {bs}", values.len()),
        ));
    }
    let mut out = vec![0u8; values.len() / bs * ts];
    out.par_chunks_mut(ts * BLOCKS_PER_TASK)
        .zip(values.par_chunks(bs * BLOCKS_PER_TASK))
        .for_each(|(out, x)| {
            for (o, x) in out.chunks_exact_mut(ts).zip(x.chunks_exact(bs)) {
                block(x, o);
            }
        });
    Ok(out)
}

/// ggml's f32 -> bf16: NaN made quiet, otherwise round to nearest even.
fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        return ((bits >> 16) | 64) as u16;
    }
    bf16::from_f32(x).to_bits()
}

fn put_half(out: &mut [u8], at: usize, v: f32) {
    out[at..at + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

fn half_of(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

fn q8_0_block(x: &[f32], out: &mut [u8]) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_half(out, 0, d);
    for (o, &v) in out[2..34].iter_mut().zip(x) {
        *o = ((v * id).round() as i8) as u8;
    }
}

/// The value of largest magnitude, the first one on a tie, with its sign.
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// The levels of a Q4_0 / Q5_0 block: d = m / -half, q = min(top, trunc(x / d + half + 0.5)).
fn symmetric_levels(x: &[f32], half: f32, top: u8) -> (f32, [u8; 32]) {
    let d = signed_absmax(x) / -half;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; 32];
    for (q, &v) in q.iter_mut().zip(x) {
        // `as u8` saturates where C's `(int8_t)` would wrap; the sum is in [0.5, 2 * half + 0.5].
        *q = ((v * id + half + 0.5) as u8).min(top);
    }
    (d, q)
}

fn q4_0_block(x: &[f32], out: &mut [u8]) {
    let (d, q) = symmetric_levels(x, 8.0, 15);
    put_half(out, 0, d);
    for j in 0..16 {
        out[2 + j] = q[j] | (q[j + 16] << 4);
    }
}

/// ggml's `quantize_row_q4_1_ref`: the block's min and range, in f32, stored as halves.
fn q4_1_block(x: &[f32], out: &mut [u8]) {
    let (min, max) = x
        .iter()
        .fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_half(out, 0, d);
    put_half(out, 2, min);
    for j in 0..16 {
        // In [0.5, 15.5]: `as u8` truncates as C's `(int8_t)` does there.
        let level = |v: f32| (((v - min) * id + 0.5) as u8).min(15);
        out[4 + j] = level(x[j]) | (level(x[j + 16]) << 4);
    }
}

fn q5_0_block(x: &[f32], out: &mut [u8]) {
    let (d, q) = symmetric_levels(x, 16.0, 31);
    put_half(out, 0, d);
    let mut qh = 0u32;
    for j in 0..16 {
        out[6 + j] = (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4);
        qh |= ((q[j] >> 4) as u32 & 1) << j;
        qh |= ((q[j + 16] >> 4) as u32 & 1) << (j + 16);
    }
    out[2..6].copy_from_slice(&qh.to_le_bytes());
}

/// ggml's `nearest_int`: round half to even (the magic-number trick, exact below 2^22).
fn nearest_int(v: f32) -> i32 {
    v.round_ties_even() as i32
}

/// ggml's `make_qkx2_quants` for a sub-block of 32 with `nmax` levels: the scale and the
/// (negated, so >= 0) min minimizing the weighted squared error, searched over `nstep + 1`
/// candidate inverse scales around `nmax / (max - min)`. Writes the levels into `levels`.
fn make_qkx2_quants(
    x: &[f32],
    weights: &[f32],
    nmax: i32,
    levels: &mut [u8],
    (rmin, rdelta, nstep): (f32, f32, i32),
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        min = min.min(x[i]);
        max = max.max(x[i]);
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    // `min` changes as better candidates are found; later candidates start from it, as in C.
    let level = |iscale: f32, v: f32, min: f32| nearest_int(iscale * (v - min)).clamp(0, nmax);
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let l = level(iscale, x[i], min);
        levels[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    let mut aux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let l = level(iscale, x[i], min);
            aux[i] = l as u8;
            let (w, l) = (weights[i], l as f32);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let diff = this_scale * aux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if cur_error < best_error {
                levels[..n].copy_from_slice(&aux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

fn q4_k_block(x: &[f32], out: &mut [u8]) {
    const SUB: usize = 32;
    let n_sub = QK_K as usize / SUB;
    let mut levels = [0u8; QK_K as usize];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let mut weights = [0f32; SUB];
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..n_sub {
        let sub = &x[SUB * j..SUB * (j + 1)];
        let sum_x2 = sub.iter().fold(0f32, |s, v| s + v * v);
        let av_x = (sum_x2 / SUB as f32).sqrt();
        for (w, v) in weights.iter_mut().zip(sub) {
            *w = av_x + v.abs();
        }
        let lv = &mut levels[SUB * j..SUB * (j + 1)];
        (scales[j], mins[j]) = make_qkx2_quants(sub, &weights, 15, lv, (-1.0, 0.1, 20));
        max_scale = max_scale.max(scales[j]);
        max_min = max_min.max(mins[j]);
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let packed = &mut out[4..16];
    packed.fill(0);
    for j in 0..n_sub {
        // C stores nearest_int into a uint8_t before MIN(63, ..): the same truncation here.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    put_half(out, 0, max_scale / 63.0);
    put_half(out, 2, max_min / 63.0);
    let (d_all, dmin_all) = (half_of(max_scale / 63.0), half_of(max_min / 63.0));
    for j in 0..n_sub {
        let (sc, m) = k_scale_min(j, &out[4..16]);
        let d = d_all * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * m as f32;
        for i in 0..SUB {
            levels[SUB * j + i] = nearest_int((x[SUB * j + i] + dm) / d).clamp(0, 15) as u8;
        }
    }
    let qs = &mut out[16..16 + QK_K as usize / 2];
    for (chunk, q) in qs.chunks_exact_mut(32).enumerate() {
        let base = 64 * chunk;
        for l in 0..32 {
            q[l] = levels[base + l] | (levels[base + l + 32] << 4);
        }
    }
}

/// Scale and min `j` of a K-quant super-block's 12 packed bytes (as `quants` reads them).
fn k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        let sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        let m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        (sc, m)
    }
}
