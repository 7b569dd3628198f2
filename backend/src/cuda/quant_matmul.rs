//! Products with weights kept in ggml's block formats on the device (kernels/quant_matmul.cu):
//! a dequantizing GEMV for up to eight activation rows, which reads every weight byte once, and
//! a dequantization to F32/BF16 for larger batches, whose product then runs on cuBLAS.
//!
//! The kernels read ggml's blocks *split*: every block's header in one array, then every
//! row's codes, 16-byte aligned, so each warp load is wide and contiguous (ggml's 34- and
//! 20-byte blocks are only 2-byte aligned). Q4_K's headers and codes are also rearranged
//! (`q4_k_layout`) so that a lane's 16 code bytes are one sub-block's, as Q4_1's are. `split`
//! and `unsplit` move the bytes between the file's layout and this one, exactly.

use super::compile::QUANT_MATMUL;
use super::launch::{args, type_suffix};
use super::q4_k_layout;
use super::CudaStorage;
use crate::{DType, Error, Result};

/// A ggml block format the kernels read (named as ggml names them).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockFormat {
    /// 32 values: f16 scale, 32 × i8.
    Q8_0,
    /// 32 values: f16 scale, f16 min, 16 bytes of nibbles.
    Q4_1,
    /// 256 values: f16 scale and min, eight 6-bit sub-block scales and mins, 128 bytes of nibbles.
    Q4_K,
    /// bitsandbytes' NF4 with double quantization (a QLoRA base): 64 values a block, four-bit
    /// indices into the NF4 table, absmaxes stored as 8-bit codes over f32 group scales and an
    /// offset. Not a ggml format; its bytes are laid out per matrix (`spec::nf4::Nf4Layout`)
    /// and its kernels are backend/src/cuda/nf4.rs.
    Nf4,
}

impl BlockFormat {
    /// The values one block holds.
    pub fn block_values(self) -> usize {
        match self {
            BlockFormat::Q8_0 | BlockFormat::Q4_1 => 32,
            BlockFormat::Q4_K => 256,
            BlockFormat::Nf4 => crate::spec::nf4::NF4_BLOCK,
        }
    }

    /// The bytes one block takes (NF4: its 32 bytes of indices and its absmax code; the matrix
    /// adds 4 bytes per 256 blocks and 4 for the offset).
    pub fn block_bytes(self) -> usize {
        match self {
            BlockFormat::Q8_0 => 34,
            BlockFormat::Q4_1 => 20,
            BlockFormat::Q4_K => 144,
            BlockFormat::Nf4 => 33,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BlockFormat::Q8_0 => "Q8_0",
            BlockFormat::Q4_1 => "Q4_1",
            BlockFormat::Q4_K => "Q4_K",
            BlockFormat::Nf4 => "NF4",
        }
    }

    /// The bytes of an [n, k] matrix, checking that rows are whole blocks.
    pub fn matrix_bytes(self, n: usize, k: usize) -> Result<usize> {
        if self == BlockFormat::Nf4 {
            return Ok(crate::spec::nf4::Nf4Layout::new(n, k)?.total_bytes());
        }
        if k == 0 || !k.is_multiple_of(self.block_values()) {
            return Err(Error::invalid(
                "quantized matmul",
                format!(
                    "{} rows hold whole blocks of {} values; {k} values per row do not",
                    self.name(),
                    self.block_values()
                ),
            ));
        }
        Ok(n * (k / self.block_values()) * self.block_bytes())
    }

    /// The header bytes that `split` moves to the front of each block, if any (Q4_K's
    /// 16-byte headers are rewritten, not just moved: `q4_k_layout`).
    pub(crate) fn split_header(self) -> Option<usize> {
        match self {
            BlockFormat::Q8_0 => Some(2),
            BlockFormat::Q4_1 => Some(4),
            BlockFormat::Q4_K => Some(q4_k_layout::HEADER_BYTES),
            BlockFormat::Nf4 => None,
        }
    }

    /// The bytes of an [n, k] matrix as the kernels store it (`split`).
    pub fn stored_bytes(self, n: usize, k: usize) -> Result<usize> {
        let file = self.matrix_bytes(n, k)?;
        // Without a split there are no headers to move, and this is the file's size.
        let headers = n * (k / self.block_values()) * self.split_header().unwrap_or(0);
        Ok(codes_offset(headers) + file - headers)
    }
}

/// Where the codes start after `headers` bytes of headers (kernels/quant_matmul.cu's
/// `codes_offset`).
pub(crate) fn codes_offset(headers: usize) -> usize {
    headers.div_ceil(16) * 16
}

/// An [n, k] matrix of the file's blocks in the kernels' layout: the headers of every block in
/// order, zeros up to a multiple of 16 bytes, then the codes of every block in order.
pub fn split(format: BlockFormat, file: &[u8], [n, k]: [usize; 2]) -> Result<Vec<u8>> {
    let want = format.matrix_bytes(n, k)?;
    if file.len() != want {
        return Err(Error::invalid(
            "quantized matmul",
            format!(
                "a {n}×{k} {} matrix takes {want} bytes, got {}",
                format.name(),
                file.len()
            ),
        ));
    }
    let Some(h) = format.split_header() else {
        return Ok(file.to_vec());
    };
    let blocks = file.len() / format.block_bytes();
    let mut out = vec![0u8; format.stored_bytes(n, k)?];
    let (headers, codes) = out.split_at_mut(codes_offset(blocks * h));
    let c = format.block_bytes() - h;
    let parts = headers.chunks_exact_mut(h).zip(codes.chunks_exact_mut(c));
    for (block, (header, code)) in file.chunks_exact(format.block_bytes()).zip(parts) {
        if format == BlockFormat::Q4_K {
            q4_k_layout::split_block(block, header, code);
        } else {
            header.copy_from_slice(&block[..h]);
            code.copy_from_slice(&block[h..]);
        }
    }
    Ok(out)
}

/// `split`'s inverse: the file's blocks of an [n, k] matrix stored split.
pub fn unsplit(format: BlockFormat, stored: &[u8], [n, k]: [usize; 2]) -> Result<Vec<u8>> {
    let want = format.stored_bytes(n, k)?;
    if stored.len() != want {
        return Err(Error::invalid(
            "quantized matmul",
            format!(
                "a stored {n}×{k} {} matrix takes {want} bytes, got {}",
                format.name(),
                stored.len()
            ),
        ));
    }
    let Some(h) = format.split_header() else {
        return Ok(stored.to_vec());
    };
    let bb = format.block_bytes();
    let blocks = format.matrix_bytes(n, k)? / bb;
    let (headers, codes) = stored.split_at(codes_offset(blocks * h));
    let c = bb - h;
    let mut out = vec![0u8; blocks * bb];
    let parts = headers.chunks_exact(h).zip(codes.chunks_exact(c));
    for (block, (header, code)) in out.chunks_exact_mut(bb).zip(parts) {
        if format == BlockFormat::Q4_K {
            q4_k_layout::unsplit_block(header, code, block);
        } else {
            block[..h].copy_from_slice(header);
            block[h..].copy_from_slice(code);
        }
    }
    Ok(out)
}

/// Output rows of one GEMV block (kernels/quant_matmul.cu's WARPS, a row per warp).
const ROWS_PER_BLOCK: usize = 8;

/// Warps of one block of the BF16-activation Q4_1 and Q4_K kernel (its INT4_WARPS).
const INT4_WARPS: usize = 4;

/// (Blocks, threads a block) of the BF16-activation kernel for n outputs and `m` activation
/// rows. Q4_1 and Q4_K warps take `Int4Rows<M>::R` rows each, 4 up to two activation rows and
/// 2 beyond (kernels/quant_matmul.cu), and loop over row groups, so the grid only sizes the
/// work; Q8_0 warps take a row each.
fn int_launch(format: BlockFormat, n: usize, m: usize) -> (u32, u32) {
    match format {
        BlockFormat::Q4_1 | BlockFormat::Q4_K => {
            let rows_per_warp = if m <= 2 { 4 } else { 2 };
            let blocks = n.div_ceil(INT4_WARPS * rows_per_warp);
            (blocks as u32, (INT4_WARPS * 32) as u32)
        }
        _ => (
            n.div_ceil(ROWS_PER_BLOCK) as u32,
            (ROWS_PER_BLOCK * 32) as u32,
        ),
    }
}

/// Checks the weight bytes and the activation dtype shared by both entry points.
fn check(w: &CudaStorage, format: BlockFormat, n: usize, k: usize, dtype: DType) -> Result<()> {
    let fail = |msg: String| Err(Error::invalid("quantized matmul", msg));
    if w.dtype() != DType::U8 {
        return fail(format!("weights are raw U8 blocks, got {:?}", w.dtype()));
    }
    let bytes = format.stored_bytes(n, k)?;
    if w.len() != bytes {
        return fail(format!(
            "a stored {n}×{k} {} matrix takes {bytes} bytes, the storage holds {}",
            format.name(),
            w.len()
        ));
    }
    if !matches!(dtype, DType::F32 | DType::BF16) {
        return fail(format!("activations must be F32 or BF16, got {dtype:?}"));
    }
    if n > i32::MAX as usize || k > i32::MAX as usize {
        return fail(format!("{n}×{k} is too large"));
    }
    Ok(())
}

/// y [m, n] = x [m, k] · Wᵀ for W [n, k] stored as `format` blocks in `w`, and x contiguous
/// from element `x_offset` of `x` (F32 or BF16; y has its dtype). Every weight byte is read
/// once per group of up to eight rows, so this is the decode path; larger m should
/// dequantize once and use a GEMM. F32 activations multiply exactly in float; BF16 ones are
/// first rounded to int8 in blocks of 32 (as llama.cpp does) for integer dot products.
pub fn quant_gemv(
    w: &CudaStorage,
    format: BlockFormat,
    [n, k]: [usize; 2],
    x: &CudaStorage,
    x_offset: usize,
    m: usize,
) -> Result<CudaStorage> {
    let dtype = x.dtype();
    check(w, format, n, k, dtype)?;
    if x_offset + m * k > x.len() {
        return Err(Error::invalid(
            "quantized matmul",
            format!("{m}×{k} activations do not fit the input"),
        ));
    }
    if !(x_offset * dtype.size_in_bytes()).is_multiple_of(16) {
        return Err(Error::invalid(
            "quantized matmul",
            format!("the kernels read activations as 16-byte vectors; element {x_offset} of a {dtype:?} input is not 16-byte aligned"),
        ));
    }
    let dev = x.cuda_device();
    let y = CudaStorage::alloc(dev, m * n, dtype)?;
    let grid = n.div_ceil(ROWS_PER_BLOCK) as u32;
    let (n32, k32, m32) = (n as i32, k as i32, m as i32);
    // BF16 activations take the integer kernels: quantized to int8 once for all rows here.
    let scratch = match dtype {
        DType::BF16 => {
            let s = CudaStorage::alloc(dev, m * k + m * k / 32 * 8, DType::U8)?;
            let f = dev.function(&QUANT_MATMUL, "quantize_activations")?;
            let warps = m * k / 32;
            let (xp, sp) = (x.ptr_at(x_offset), s.ptr());
            // SAFETY: one lane per activation of m × k (checked to fit x); the scratch holds
            // m × k codes and m × k / 32 (scale, sum) pairs.
            unsafe {
                dev.launch(
                    f,
                    (warps.div_ceil(8) as u32, 1, 1),
                    256,
                    0,
                    &mut args![xp, sp, m32, k32],
                )?
            };
            Some(s)
        }
        _ => None,
    };
    let mut row = 0;
    while row < m {
        // The largest compiled row count that fits what is left: 8, 4, 2 or 1.
        let rows = [8, 4, 2, 1]
            .into_iter()
            .find(|&r| r <= m - row)
            .unwrap_or(1);
        let yp = y.ptr_at(row * n);
        // SAFETY: `w` holds n rows of k / block_values blocks (checked), `x` (or its int8
        // scratch) rows row..row+rows of k values from x_offset (checked) and `y` m × n
        // outputs; each output row of the `rows` rows is written by one warp only.
        match &scratch {
            Some(s) => {
                let name = format!("quant_gemv_int_{}_m{rows}", format.name());
                let f = dev.function(&QUANT_MATMUL, &name)?;
                let (wp, sp, r0) = (w.ptr(), s.ptr(), row as i32);
                let (blocks, threads) = int_launch(format, n, rows);
                unsafe {
                    dev.launch(
                        f,
                        (blocks, 1, 1),
                        threads,
                        0,
                        &mut args![wp, sp, yp, n32, k32, m32, r0],
                    )?
                };
            }
            None => {
                let name = format!(
                    "quant_gemv_{}_m{rows}_{}",
                    format.name(),
                    type_suffix(dtype)
                );
                let f = dev.function(&QUANT_MATMUL, &name)?;
                let (wp, xp) = (w.ptr(), x.ptr_at(x_offset + row * k));
                unsafe {
                    dev.launch(
                        f,
                        (grid, 1, 1),
                        (ROWS_PER_BLOCK * 32) as u32,
                        0,
                        &mut args![wp, xp, yp, n32, k32],
                    )?
                };
            }
        }
        row += rows;
    }
    Ok(y)
}

/// W [n, k] stored as `format` blocks, as a dense [n, k] matrix of `dtype` (F32 or BF16).
pub fn dequantize(
    w: &CudaStorage,
    format: BlockFormat,
    [n, k]: [usize; 2],
    dtype: DType,
) -> Result<CudaStorage> {
    check(w, format, n, k, dtype)?;
    let dev = w.cuda_device();
    let out = CudaStorage::alloc(dev, n * k, dtype)?;
    let units = n * k / 32;
    let block = 256u32;
    let grid = units.div_ceil(block as usize) as u32;
    let f = dev.function(
        &QUANT_MATMUL,
        &format!("dequantize_{}_{}", format.name(), type_suffix(dtype)),
    )?;
    let (wp, op, n32, k32) = (w.ptr(), out.ptr(), n as i32, k as i32);
    // SAFETY: one thread per 32-value unit of the n × k matrix (checked against the bytes).
    unsafe { dev.launch(f, (grid, 1, 1), block, 0, &mut args![wp, op, n32, k32])? };
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn split_puts_the_headers_ahead_of_aligned_codes_and_unsplit_restores_the_file() {
        // Four Q8_0 blocks of 34 bytes, each byte its own position.
        let file: Vec<u8> = (0..4 * 34).map(|i| i as u8).collect();
        let stored = split(BlockFormat::Q8_0, &file, [2, 64]).unwrap();
        assert_eq!(stored.len(), 16 + 4 * 32);
        assert_eq!(stored[..8], [0, 1, 34, 35, 68, 69, 102, 103]);
        assert_eq!(stored[8..16], [0; 8], "padding to 16 bytes");
        assert_eq!(stored[16..48], file[2..34]);
        assert_eq!(stored[48..80], file[36..68]);
        assert_eq!(unsplit(BlockFormat::Q8_0, &stored, [2, 64]).unwrap(), file);
    }

    /// Pseudo-random bytes (any bytes are valid Q4_1 and Q4_K blocks: headers are halves and
    /// 6-bit fields, codes are nibbles).
    pub(crate) fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn q4_k_stored_is_the_files_size_headers_first_then_each_blocks_codes() {
        // 3 rows of 5 super-blocks: rows are not a multiple of 512 values.
        let (n, k) = (3, 1280);
        let file = random_bytes(BlockFormat::Q4_K.matrix_bytes(n, k).unwrap(), 7);
        let stored = split(BlockFormat::Q4_K, &file, [n, k]).unwrap();
        assert_eq!(stored.len(), file.len());
        assert_eq!(BlockFormat::Q4_K.stored_bytes(n, k).unwrap(), file.len());
        let blocks = n * k / 256;
        let (headers, codes) = stored.split_at(16 * blocks);
        for (b, block) in file.chunks_exact(144).enumerate() {
            let (mut h, mut c) = ([0u8; 16], [0u8; 128]);
            q4_k_layout::split_block(block, &mut h, &mut c);
            assert_eq!(headers[16 * b..16 * b + 16], h, "block {b}'s header");
            assert_eq!(codes[128 * b..128 * b + 128], c, "block {b}'s codes");
        }
    }

    #[test]
    fn unsplit_restores_q4_k_and_q4_1_matrices_byte_for_byte() {
        for (format, n, k) in [
            (BlockFormat::Q4_K, 5, 768),
            (BlockFormat::Q4_K, 2, 5632),
            (BlockFormat::Q4_1, 3, 96),
            (BlockFormat::Q8_0, 1, 32),
        ] {
            let file = random_bytes(format.matrix_bytes(n, k).unwrap(), n as u64 * 31 + k as u64);
            let stored = split(format, &file, [n, k]).unwrap();
            assert_eq!(stored.len(), format.stored_bytes(n, k).unwrap());
            assert_eq!(
                unsplit(format, &stored, [n, k]).unwrap(),
                file,
                "{format:?} {n}×{k}"
            );
        }
    }
}
