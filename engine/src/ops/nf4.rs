//! NF4 with double quantization on the host: bitsandbytes' `quantize_4bit(quant_type="nf4",
//! blocksize=64, compress_statistics=True)` and its dequantization, into and out of the bytes
//! of one matrix as `backend::spec::nf4::Nf4Layout` lays them out (the rules are there).
//!
//! Checked against bitsandbytes itself (tests/fixtures/nf4): the same bytes from the same
//! values, and bit-equal dequantized values from the same bytes.

use crate::backend::spec::nf4::{
    dynamic_index, nf4_index, Nf4Layout, ABSMAX_GROUP, DYNAMIC_VALUES, NF4_BLOCK, NF4_VALUES,
};
use crate::{Error, Result};
use rayon::prelude::*;

/// bitsandbytes divides by max(absmax, 1e-38), so an all-zero block quantizes to zeros.
const TINY: f32 = 1e-38;

/// The bytes of a [rows, cols] matrix of `values` (row-major) in NF4; cols must be a multiple
/// of 64.
pub fn quantize(values: &[f32], [rows, cols]: [usize; 2]) -> Result<Vec<u8>> {
    let layout = layout_of(rows, cols, values.len(), "values")?;
    let mut out = vec![0u8; layout.total_bytes()];
    let (indices, rest) = out.split_at_mut(layout.codes().end);
    let absmax: Vec<f32> = values
        .par_chunks_exact(NF4_BLOCK)
        .zip(indices.par_chunks_exact_mut(NF4_BLOCK / 2))
        .map(|(block, packed)| quantize_block(block, packed))
        .collect();

    // Second level: the absmaxes less their mean, in groups of 256 on the dynamic map.
    let offset = mean(&absmax);
    let centred: Vec<f32> = absmax.iter().map(|a| a - offset).collect();
    let rest_start = layout.codes().end;
    let at = |r: std::ops::Range<usize>| r.start - rest_start..r.end - rest_start;
    let (scales_at, codes_at) = (at(layout.scales()), at(layout.absmax_codes()));
    let mut scales = Vec::with_capacity(layout.groups);
    for (group, codes) in centred
        .chunks(ABSMAX_GROUP)
        .zip(rest[codes_at].chunks_mut(ABSMAX_GROUP))
    {
        let scale = group.iter().fold(0f32, |m, c| m.max(c.abs()));
        let inv = 1.0 / scale.max(TINY);
        for (code, &c) in codes.iter_mut().zip(group) {
            *code = dynamic_index((c * inv).clamp(-1.0, 1.0));
        }
        scales.push(scale);
    }
    for (dst, s) in rest[scales_at].chunks_exact_mut(4).zip(&scales) {
        dst.copy_from_slice(&s.to_le_bytes());
    }
    rest[at(layout.offset())].copy_from_slice(&offset.to_le_bytes());
    Ok(out)
}

/// The [rows, cols] values (row-major) of NF4 `bytes`, bit-equal to bitsandbytes'
/// `dequantize_4bit` in F32.
pub fn dequantize(bytes: &[u8], [rows, cols]: [usize; 2]) -> Result<Vec<f32>> {
    let layout = layout_of(rows, cols, bytes.len(), "bytes")?;
    let absmax = absmaxes(bytes, &layout);
    let mut out = vec![0f32; layout.values];
    out.par_chunks_exact_mut(NF4_BLOCK)
        .zip(bytes[layout.codes()].par_chunks_exact(NF4_BLOCK / 2))
        .zip(absmax.par_iter())
        .for_each(|((values, packed), &a)| {
            for (pair, &byte) in values.chunks_exact_mut(2).zip(packed) {
                pair[0] = NF4_VALUES[(byte >> 4) as usize] * a;
                pair[1] = NF4_VALUES[(byte & 0xF) as usize] * a;
            }
        });
    Ok(out)
}

/// Every block's absmax back from its code: DYNAMIC[code] · scale + offset, two roundings.
pub fn absmaxes(bytes: &[u8], layout: &Nf4Layout) -> Vec<f32> {
    let f32_at =
        |i: usize| f32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    let offset = f32_at(layout.offset().start);
    let scales_start = layout.scales().start;
    bytes[layout.absmax_codes()]
        .iter()
        .enumerate()
        .map(|(b, &code)| {
            let scale = f32_at(scales_start + 4 * (b / ABSMAX_GROUP));
            DYNAMIC_VALUES[code as usize] * scale + offset
        })
        .collect()
}

/// The layout of [rows, cols], checking that `len` (of values or of bytes) fits it.
fn layout_of(rows: usize, cols: usize, len: usize, what: &str) -> Result<Nf4Layout> {
    let layout = Nf4Layout::new(rows, cols)?;
    let want = match what {
        "values" => layout.values,
        _ => layout.total_bytes(),
    };
    if len != want {
        return Err(Error::invalid(
            "NF4",
            format!("a {rows}×{cols} NF4 matrix has {want} {what}, got {len}"),
        ));
    }
    Ok(layout)
}

/// One block's NF4 indices, packed two a byte (the earlier value high); returns its absmax.
fn quantize_block(block: &[f32], packed: &mut [u8]) -> f32 {
    let absmax = block.iter().fold(0f32, |m, x| m.max(x.abs()));
    let inv = 1.0 / absmax.max(TINY);
    for (byte, pair) in packed.iter_mut().zip(block.chunks_exact(2)) {
        *byte = (nf4_index(pair[0] * inv) << 4) | nf4_index(pair[1] * inv);
    }
    absmax
}

/// The mean in f64, rounded once to f32. bitsandbytes takes torch's f32 `mean()`, whose
/// summation order depends on the device and the vector width; the two can differ by an ulp.
fn mean(values: &[f32]) -> f32 {
    if values.is_empty() {
        return 0.0;
    }
    (values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_of_table_values_round_trips_exactly() {
        // Each block holds every NF4 value scaled by the block's absmax (a power of two, so
        // the scaling is exact); absmaxes 1, 2, 4, 8 give one group whose offset is 3.75.
        let values: Vec<f32> = (0..4 * 64)
            .map(|i| NF4_VALUES[i % 16] * (1 << (i / 64)) as f32)
            .collect();
        let bytes = quantize(&values, [2, 128]).unwrap();
        assert_eq!(
            &bytes[..8],
            &[0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]
        );
        let back = dequantize(&bytes, [2, 128]).unwrap();
        let layout = Nf4Layout::new(2, 128).unwrap();
        let offset = &bytes[layout.offset()];
        assert_eq!(f32::from_le_bytes(offset.try_into().unwrap()), 3.75);
        // The absmaxes come back to the dynamic map's precision: half its step (0.9 / 64 above
        // 0.1) times the group scale 4.25.
        let a = absmaxes(&bytes, &layout);
        for (b, &got) in a.iter().enumerate() {
            let want = (1 << b) as f32;
            assert!((got - want).abs() < 0.03, "block {b}: {got} vs {want}");
        }
        for (i, (&got, &want)) in back.iter().zip(&values).enumerate() {
            assert_eq!(got, NF4_VALUES[i % 16] * a[i / 64], "value {i}");
            assert!((got - want).abs() < 0.03, "value {i}: {got} vs {want}");
        }
    }

    #[test]
    fn an_all_zero_matrix_quantizes_to_the_zero_index_and_back_to_zeros() {
        let bytes = quantize(&[0.0; 64], [1, 64]).unwrap();
        assert!(bytes[..32].iter().all(|&b| b == 0x77), "{:?}", &bytes[..32]);
        assert!(dequantize(&bytes, [1, 64])
            .unwrap()
            .iter()
            .all(|&v| v == 0.0));
    }

    #[test]
    fn lengths_that_do_not_fit_the_shape_are_errors_naming_them() {
        let e = quantize(&[0.0; 60], [1, 64]).unwrap_err().to_string();
        assert!(e.contains("64 values, got 60"), "{e}");
        let e = dequantize(&[0; 10], [1, 64]).unwrap_err().to_string();
        assert!(e.contains("41 bytes, got 10"), "{e}");
        let e = quantize(&[0.0; 96], [1, 96]).unwrap_err().to_string();
        assert!(e.contains("blocks of 64"), "{e}");
    }
}
