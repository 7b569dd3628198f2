//! Q4_K's layout on the device (kernels/quant_matmul.cu reads it; `quant_matmul::split` and
//! `unsplit` move the bytes). Same size as the file, ggml's bits in other places:
//!
//! - every super-block's 16-byte header in order: f16 d and f16 dmin as the file has them,
//!   then sub-block j's 6-bit scale and min as the 12-bit record `scale | min << 6` at bit
//!   12 j of the next 96 bits (little-endian). ggml packs the high bits of sub-blocks 4..7
//!   into the top of other bytes; here one lane finds its sub-block's pair with three shifts.
//! - then every super-block's 128 code bytes in order, 16 per 32-value sub-block as Q4_1 has
//!   them: byte i holds value i (low nibble) and value i + 16 (high). ggml's 32-byte chunk c
//!   holds sub-block 2c in its low nibbles and 2c + 1 in its high ones, so a lane reading 16
//!   bytes needed two scales, two mins and activations from two places.
//!
//! Every bit of the 12 packed bytes is one of the sixteen 6-bit values, so the records hold
//! exactly the same information and `unsplit_block` restores the file's bytes.

/// The header bytes of a stored super-block (its 128 code bytes follow all the headers).
pub const HEADER_BYTES: usize = 16;

/// Sub-block j's (scale, min) from ggml's 12 packed bytes (`get_scale_min_k4`).
fn file_scale_min(packed: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (packed[j] & 63, packed[j + 4] & 63)
    } else {
        let sc = (packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4);
        let mn = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
        (sc, mn)
    }
}

/// ggml's 12 packed bytes from the eight (scale, min) pairs: `file_scale_min`'s inverse.
fn file_packed(pairs: &[(u8, u8); 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for i in 0..4 {
        let (sc, mn) = pairs[i];
        let (sc_hi, mn_hi) = pairs[i + 4];
        q[i] = sc | ((sc_hi >> 4) << 6);
        q[i + 4] = mn | ((mn_hi >> 4) << 6);
        q[i + 8] = (sc_hi & 0x0F) | ((mn_hi & 0x0F) << 4);
    }
    q
}

/// The eight (scale, min) pairs of a stored header's records.
pub fn records(header: &[u8]) -> [(u8, u8); 8] {
    let mut bits = [0u8; 16];
    bits[..12].copy_from_slice(&header[4..16]);
    let bits = u128::from_le_bytes(bits);
    std::array::from_fn(|j| {
        let r = (bits >> (12 * j)) as u16;
        ((r & 63) as u8, ((r >> 6) & 63) as u8)
    })
}

/// A file super-block (144 bytes) as its stored header and codes.
pub fn split_block(block: &[u8], header: &mut [u8], codes: &mut [u8]) {
    header[..4].copy_from_slice(&block[..4]);
    let packed = &block[4..16];
    let bits = (0..8).fold(0u128, |acc, j| {
        let (sc, mn) = file_scale_min(packed, j);
        acc | (u128::from(sc) | u128::from(mn) << 6) << (12 * j)
    });
    header[4..16].copy_from_slice(&bits.to_le_bytes()[..12]);
    for (c, q) in block[16..].chunks_exact(32).enumerate() {
        let (low, high) = codes[32 * c..32 * c + 32].split_at_mut(16);
        for i in 0..16 {
            low[i] = (q[i] & 0x0F) | ((q[i + 16] & 0x0F) << 4);
            high[i] = (q[i] >> 4) | (q[i + 16] & 0xF0);
        }
    }
}

/// `split_block`'s inverse: the file's 144 bytes from a stored header and codes.
pub fn unsplit_block(header: &[u8], codes: &[u8], block: &mut [u8]) {
    block[..4].copy_from_slice(&header[..4]);
    block[4..16].copy_from_slice(&file_packed(&records(header)));
    for (c, q) in block[16..].chunks_exact_mut(32).enumerate() {
        let (low, high) = codes[32 * c..32 * c + 32].split_at(16);
        for i in 0..16 {
            q[i] = (low[i] & 0x0F) | ((high[i] & 0x0F) << 4);
            q[i + 16] = (low[i] >> 4) | (high[i] & 0xF0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of a Q4_K super-block, and of its codes.
    const BLOCK_BYTES: usize = 144;
    const CODE_BYTES: usize = 128;

    /// A super-block of pseudo-random bytes (every bit pattern of the scales is a valid
    /// block, so random bytes are real-looking blocks).
    fn random_block(seed: u64) -> Vec<u8> {
        crate::cuda::quant_matmul::tests::random_bytes(BLOCK_BYTES, seed)
    }

    fn split(block: &[u8]) -> ([u8; HEADER_BYTES], [u8; CODE_BYTES]) {
        let (mut h, mut c) = ([0u8; HEADER_BYTES], [0u8; CODE_BYTES]);
        split_block(block, &mut h, &mut c);
        (h, c)
    }

    #[test]
    fn a_stored_sub_block_holds_ggmls_scale_min_and_32_values_in_q4_1_order() {
        for seed in 0..50 {
            let block = random_block(seed);
            let (header, codes) = split(&block);
            assert_eq!(header[..4], block[..4], "d and dmin stay");
            let recs = records(&header);
            for (j, &rec) in recs.iter().enumerate() {
                assert_eq!(
                    rec,
                    file_scale_min(&block[4..16], j),
                    "seed {seed} record {j}"
                );
                // ggml: value l of sub-block j is chunk j / 2's byte l, low nibble for even j.
                let chunk = &block[16 + 32 * (j / 2)..16 + 32 * (j / 2) + 32];
                let file_value = |l: usize| {
                    if j % 2 == 0 {
                        chunk[l] & 0x0F
                    } else {
                        chunk[l] >> 4
                    }
                };
                let sub = &codes[16 * j..16 * j + 16];
                for (i, &byte) in sub.iter().enumerate() {
                    assert_eq!(byte & 0x0F, file_value(i), "seed {seed} sub {j} value {i}");
                    assert_eq!(byte >> 4, file_value(i + 16));
                }
            }
        }
    }

    #[test]
    fn the_records_sit_at_bit_12j_after_d_and_dmin() {
        // Scales 1..8 and mins 10..17 as a file block packs them, then their stored places.
        let pairs: [(u8, u8); 8] = std::array::from_fn(|j| (j as u8 + 1, j as u8 + 10));
        let mut block = vec![0u8; BLOCK_BYTES];
        block[4..16].copy_from_slice(&file_packed(&pairs));
        let (header, _) = split(&block);
        let mut bits = [0u8; 16];
        bits[..12].copy_from_slice(&header[4..]);
        let bits = u128::from_le_bytes(bits);
        for (j, &(sc, mn)) in pairs.iter().enumerate() {
            assert_eq!(
                (bits >> (12 * j)) & 0xFFF,
                u128::from(sc) | u128::from(mn) << 6
            );
        }
    }

    #[test]
    fn unsplit_block_restores_every_file_byte() {
        for seed in 0..200 {
            let block = random_block(seed);
            let (header, codes) = split(&block);
            let mut back = vec![0u8; BLOCK_BYTES];
            unsplit_block(&header, &codes, &mut back);
            assert_eq!(back, block, "seed {seed}");
        }
    }
}
