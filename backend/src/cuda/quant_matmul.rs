//! Products with weights kept in ggml's block formats on the device (kernels/quant_matmul.cu):
//! a dequantizing GEMV for up to eight activation rows, which reads every weight byte once, and
//! a dequantization to F32/BF16 for larger batches, whose product then runs on cuBLAS.

use super::compile::QUANT_MATMUL;
use super::launch::{args, type_suffix};
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
}

/// Output rows of one GEMV block (kernels/quant_matmul.cu's WARPS).
const ROWS_PER_BLOCK: usize = 8;

/// Checks the weight bytes and the activation dtype shared by both entry points.
fn check(w: &CudaStorage, format: BlockFormat, n: usize, k: usize, dtype: DType) -> Result<()> {
    let fail = |msg: String| Err(Error::invalid("quantized matmul", msg));
    if w.dtype() != DType::U8 {
        return fail(format!("weights are raw U8 blocks, got {:?}", w.dtype()));
    }
    let bytes = format.matrix_bytes(n, k)?;
    if w.len() != bytes {
        return fail(format!(
            "a {n}×{k} {} matrix takes {bytes} bytes, the storage holds {}",
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
/// dequantize once and use a GEMM.
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
    let dev = x.cuda_device();
    let y = CudaStorage::alloc(dev, m * n, dtype)?;
    let grid = n.div_ceil(ROWS_PER_BLOCK) as u32;
    let (n32, k32) = (n as i32, k as i32);
    let mut row = 0;
    while row < m {
        // The largest compiled row count that fits what is left: 8, 4, 2 or 1.
        let rows = [8, 4, 2, 1]
            .into_iter()
            .find(|&r| r <= m - row)
            .unwrap_or(1);
        let name = format!(
            "quant_gemv_{}_m{rows}_{}",
            format.name(),
            type_suffix(dtype)
        );
        let f = dev.function(&QUANT_MATMUL, &name)?;
        let (wp, xp, yp) = (w.ptr(), x.ptr_at(x_offset + row * k), y.ptr_at(row * n));
        // SAFETY: `w` holds n rows of k / block_values blocks (checked), `x` rows row..row+rows
        // of k values from x_offset (checked) and `y` m × n outputs; each warp writes only its
        // own output row of the `rows` rows.
        unsafe {
            dev.launch(
                f,
                (grid, 1, 1),
                (ROWS_PER_BLOCK * 32) as u32,
                0,
                &mut args![wp, xp, yp, n32, k32],
            )?
        };
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
