//! NF4 with double quantization, as bitsandbytes stores a QLoRA base
//! (`quantize_4bit(quant_type="nf4", blocksize=64, compress_statistics=True)`): the value
//! tables and where each part of one matrix lies in its bytes. The host quantizer
//! (engine/src/ops/nf4.rs) and the CUDA kernels (kernels/nf4.cu, whose tables are generated
//! from these) both read this file.
//!
//! The rules (bitsandbytes' `functional.py` and its reference kernels):
//! - The matrix is quantized flat, in blocks of 64 values. A block's absmax a = max |x|; each
//!   value becomes the index of the nearest of the 16 NF4 values to x · (1 / a) (the count of
//!   midpoints between neighbours it lies strictly above). Two indices share a byte, the
//!   earlier value in the high nibble.
//! - The absmaxes are stored as 8-bit codes: their mean (the offset) is subtracted, then they
//!   are quantized in groups of 256 like any tensor in bitsandbytes' blockwise 8-bit scheme:
//!   a group's absmax s is kept as an f32 and each centred value becomes the nearest of the
//!   256 values of the signed dynamic map to c · (1 / s). The last group may be partial.
//! - Dequantizing: a = DYNAMIC[code] · s + offset, then x = NF4[index] · a, every step an f32
//!   operation rounded on its own (no fused multiply-add), so every device gives the same bits.
//!
//! Rows must hold whole blocks (cols a multiple of 64), so a block never straddles two rows
//! and row r's blocks are r · cols / 64 onwards, as the GEMV wants. bitsandbytes itself
//! quantizes any flat length; its weights are [out, in] with in a multiple of 64 in practice.

use crate::{Error, Result};
use std::ops::Range;

/// Values per NF4 block.
pub const NF4_BLOCK: usize = 64;

/// Absmaxes per group of the second quantization.
pub const ABSMAX_GROUP: usize = 256;

/// The 16 NF4 values (QLoRA, appendix E; bitsandbytes' table), ascending.
pub const NF4_VALUES: [f32; 16] = [
    -1.0,
    -0.6961928,
    -0.52507305,
    -0.3949175,
    -0.28444138,
    -0.18477343,
    -0.091050036,
    0.0,
    0.0795803,
    0.1609302,
    0.2461123,
    0.33791524,
    0.44070983,
    0.562617,
    0.72295684,
    1.0,
];

/// bitsandbytes' signed dynamic 8-bit map (`create_dynamic_map()`: a dynamic exponent and a
/// shrinking fraction, from ±5.5e-7 to ±0.993 and 1.0), ascending; the absmax codes index it.
#[rustfmt::skip]
pub const DYNAMIC_VALUES: [f32; 256] = [
    -0.99296874, -0.9789063, -0.96484375, -0.9507812, -0.93671876, -0.92265624, -0.9085938, -0.89453125,
    -0.8804687, -0.86640626, -0.85234374, -0.8382813, -0.82421875, -0.8101562, -0.79609376, -0.78203124,
    -0.7679688, -0.75390625, -0.7398437, -0.72578126, -0.7117188, -0.6976563, -0.68359375, -0.6695312,
    -0.65546876, -0.6414063, -0.6273438, -0.61328125, -0.5992187, -0.58515626, -0.5710938, -0.5570313,
    -0.54296875, -0.5289062, -0.5148437, -0.50078124, -0.4867187, -0.47265625, -0.45859373, -0.44453126,
    -0.43046874, -0.41640624, -0.40234375, -0.38828123, -0.37421876, -0.36015624, -0.34609374, -0.33203125,
    -0.31796873, -0.30390626, -0.28984374, -0.27578127, -0.26171875, -0.24765624, -0.23359375, -0.21953125,
    -0.20546874, -0.19140625, -0.17734376, -0.16328125, -0.14921875, -0.13515624, -0.12109375, -0.107031256,
    -0.09859375, -0.09578126, -0.092968754, -0.09015625, -0.08734375, -0.08453125, -0.08171876, -0.07890625,
    -0.07609375, -0.07328125, -0.070468746, -0.067656256, -0.06484375, -0.06203125, -0.059218753, -0.05640625,
    -0.05359375, -0.05078125, -0.04796875, -0.04515625, -0.042343747, -0.03953125, -0.036718752, -0.03390625,
    -0.03109375, -0.028281251, -0.02546875, -0.02265625, -0.019843752, -0.01703125, -0.01421875, -0.01140625,
    -0.00971875, -0.009156249, -0.00859375, -0.00803125, -0.00746875, -0.00690625, -0.00634375, -0.00578125,
    -0.0052187503, -0.0046562497, -0.00409375, -0.0035312497, -0.00296875, -0.00240625, -0.00184375, -0.0012812499,
    -0.0009437501, -0.00083125, -0.00071875006, -0.0006062501, -0.00049375003, -0.00038125002, -0.00026875004, -0.00015625001,
    -8.875e-05, -6.625e-05, -4.375e-05, -2.1249998e-05, -7.75e-06, -3.2500002e-06, -5.5000004e-07, 0.0,
    5.5000004e-07, 3.2500002e-06, 7.75e-06, 2.1249998e-05, 4.375e-05, 6.625e-05, 8.875e-05, 0.00015625001,
    0.00026875004, 0.00038125002, 0.00049375003, 0.0006062501, 0.00071875006, 0.00083125, 0.0009437501, 0.0012812499,
    0.00184375, 0.00240625, 0.00296875, 0.0035312497, 0.00409375, 0.0046562497, 0.0052187503, 0.00578125,
    0.00634375, 0.00690625, 0.00746875, 0.00803125, 0.00859375, 0.009156249, 0.00971875, 0.01140625,
    0.01421875, 0.01703125, 0.019843752, 0.02265625, 0.02546875, 0.028281251, 0.03109375, 0.03390625,
    0.036718752, 0.03953125, 0.042343747, 0.04515625, 0.04796875, 0.05078125, 0.05359375, 0.05640625,
    0.059218753, 0.06203125, 0.06484375, 0.067656256, 0.070468746, 0.07328125, 0.07609375, 0.07890625,
    0.08171876, 0.08453125, 0.08734375, 0.09015625, 0.092968754, 0.09578126, 0.09859375, 0.107031256,
    0.12109375, 0.13515624, 0.14921875, 0.16328125, 0.17734376, 0.19140625, 0.20546874, 0.21953125,
    0.23359375, 0.24765624, 0.26171875, 0.27578127, 0.28984374, 0.30390626, 0.31796873, 0.33203125,
    0.34609374, 0.36015624, 0.37421876, 0.38828123, 0.40234375, 0.41640624, 0.43046874, 0.44453126,
    0.45859373, 0.47265625, 0.4867187, 0.50078124, 0.5148437, 0.5289062, 0.54296875, 0.5570313,
    0.5710938, 0.58515626, 0.5992187, 0.61328125, 0.6273438, 0.6414063, 0.65546876, 0.6695312,
    0.68359375, 0.6976563, 0.7117188, 0.72578126, 0.7398437, 0.75390625, 0.7679688, 0.78203124,
    0.79609376, 0.8101562, 0.82421875, 0.8382813, 0.85234374, 0.86640626, 0.8804687, 0.89453125,
    0.9085938, 0.92265624, 0.93671876, 0.9507812, 0.96484375, 0.9789063, 0.99296874, 1.0,
];

/// Where each part of one NF4 matrix of `values` numbers lies in its bytes, in this order:
///
/// | part | bytes |
/// |---|---|
/// | NF4 indices, two a byte, the earlier value in the high nibble | values / 2 |
/// | second-level scales: one f32 (little-endian) per group of 256 absmaxes | 4 · groups |
/// | the offset (the absmaxes' mean), f32 | 4 |
/// | absmax codes, one byte per block of 64 | blocks |
///
/// The f32 parts come before the bytes of codes, so they are 4-byte aligned (values / 2 is a
/// multiple of 32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nf4Layout {
    /// rows · cols.
    pub values: usize,
    /// Blocks of 64 values: one absmax each.
    pub blocks: usize,
    /// Groups of up to 256 absmaxes: one second-level scale each.
    pub groups: usize,
}

impl Nf4Layout {
    /// The layout of a [rows, cols] matrix; cols must be a positive multiple of 64.
    pub fn new(rows: usize, cols: usize) -> Result<Self> {
        if cols == 0 || !cols.is_multiple_of(NF4_BLOCK) {
            return Err(Error::invalid(
                "NF4",
                format!(
                    "NF4 rows hold whole blocks of {NF4_BLOCK} values; {cols} values per row do not"
                ),
            ));
        }
        let values = rows
            .checked_mul(cols)
            .filter(|v| *v <= isize::MAX as usize / 2)
            .ok_or_else(|| Error::invalid("NF4", format!("a {rows}×{cols} matrix is too large")))?;
        let blocks = values / NF4_BLOCK;
        Ok(Nf4Layout {
            values,
            blocks,
            groups: blocks.div_ceil(ABSMAX_GROUP),
        })
    }

    /// The packed NF4 indices.
    pub fn codes(&self) -> Range<usize> {
        0..self.values / 2
    }

    /// The second-level scales (f32, one per group).
    pub fn scales(&self) -> Range<usize> {
        let start = self.codes().end;
        start..start + 4 * self.groups
    }

    /// The offset added back to every absmax (f32).
    pub fn offset(&self) -> Range<usize> {
        let start = self.scales().end;
        start..start + 4
    }

    /// The 8-bit absmax codes, one per block.
    pub fn absmax_codes(&self) -> Range<usize> {
        let start = self.offset().end;
        start..start + self.blocks
    }

    /// The bytes of the whole matrix: about 0.516 a value (4.13 bits).
    pub fn total_bytes(&self) -> usize {
        self.absmax_codes().end
    }
}

/// The index of the NF4 value nearest to `x` (x already divided by its block's absmax):
/// how many midpoints between neighbouring values lie strictly below x.
pub fn nf4_index(x: f32) -> u8 {
    nearest(&NF4_VALUES, x)
}

/// The index of the dynamic-map value nearest to `x` (x in [-1, 1]), the same way.
pub fn dynamic_index(x: f32) -> u8 {
    nearest(&DYNAMIC_VALUES, x)
}

/// The count of midpoints (a + b) / 2 (in f32, as bitsandbytes computes its bounds) of the
/// ascending `table` that lie strictly below `x`: a binary search over the midpoints.
fn nearest(table: &[f32], x: f32) -> u8 {
    let (mut lo, mut hi) = (0, table.len() - 1);
    // Invariant: midpoints below lo are < x, those at hi and above are >= x.
    while lo < hi {
        let mid = (lo + hi) / 2;
        if (table[mid] + table[mid + 1]) / 2.0 < x {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_places_the_parts_back_to_back_with_the_f32s_aligned() {
        // 24 × 704: 264 blocks, so a second group of 8.
        let l = Nf4Layout::new(24, 704).unwrap();
        assert_eq!((l.values, l.blocks, l.groups), (16896, 264, 2));
        assert_eq!(l.codes(), 0..8448);
        assert_eq!(l.scales(), 8448..8456);
        assert_eq!(l.offset(), 8456..8460);
        assert_eq!(l.absmax_codes(), 8460..8724);
        assert_eq!(l.total_bytes(), 8724);
        let e = Nf4Layout::new(2, 96).unwrap_err().to_string();
        assert!(e.contains("blocks of 64") && e.contains("96"), "{e}");
    }

    #[test]
    fn a_value_goes_to_the_nearest_table_entry_and_a_midpoint_to_the_lower() {
        assert_eq!(nf4_index(-1.0), 0);
        assert_eq!(nf4_index(1.0), 15);
        assert_eq!(nf4_index(0.0), 7);
        assert_eq!(nf4_index(0.03979), 7);
        assert_eq!(nf4_index(0.0398), 8);
        // The midpoint between 0.0 and 0.0795803 itself stays below.
        assert_eq!(nf4_index((0.0 + NF4_VALUES[8]) / 2.0), 7);
        assert_eq!(nf4_index(0.9), 15);
        assert_eq!(nf4_index(f32::INFINITY), 15);
        for (i, &v) in DYNAMIC_VALUES.iter().enumerate() {
            assert_eq!(dynamic_index(v) as usize, i);
        }
        assert_eq!(dynamic_index(-1.0), 0);
    }
}
