//! Reductions over any dims (kernels/reduce.cu): the reduced dims are moved last and packed,
//! then each output element reduces one contiguous row.

use super::compile::REDUCE;
use super::copy::{cast, fill};
use super::launch::{args, type_suffix};
use super::CudaStorage;
use crate::spec::ReduceOp;
use crate::{DType, Layout, Result};

/// The dtype a reduction produces, as on the CPU: integer sums widen to I64, arg-reductions
/// give I64, the rest keep the input dtype.
pub fn output_dtype(input: DType, op: ReduceOp) -> DType {
    match op {
        ReduceOp::Sum if !input.is_float() => DType::I64,
        ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I64,
        _ => input,
    }
}

/// Reduces `dims` (sorted, unique) of the view `l`; the result has the kept dims in order.
pub fn reduce(s: &CudaStorage, l: &Layout, dims: &[usize], op: ReduceOp) -> Result<CudaStorage> {
    let dev = s.cuda_device();
    let kept: Vec<usize> = (0..l.rank()).filter(|d| !dims.contains(d)).collect();
    let perm: Vec<usize> = kept.iter().chain(dims).copied().collect();
    let rows: usize = kept.iter().map(|&d| l.shape()[d]).product();
    let k: usize = dims.iter().map(|&d| l.shape()[d]).product();
    let out = CudaStorage::alloc(dev, rows, output_dtype(s.dtype(), op))?;
    if rows == 0 {
        return Ok(out);
    }
    if k == 0 {
        // Only sums reach here with an empty dim (the op layer refuses max/min of nothing).
        fill(&out, &Layout::contiguous(&[rows]), 0.0)?;
        return Ok(out);
    }
    let leading = dims.iter().enumerate().all(|(i, &d)| d == i);
    if op == ReduceOp::Sum && leading && l.is_contiguous() && rows > 1 && k > 1 {
        return column_sums(s, l.offset(), k, rows, out);
    }
    let permuted = l.permuted(&perm);
    let packed;
    let (src, offset) = if permuted.is_contiguous() {
        (s, permuted.offset())
    } else {
        packed = cast(s, &permuted, s.dtype())?;
        (&packed, 0)
    };
    let (x, y, rows_i, k_i) = (src.ptr_at(offset), out.ptr(), rows as i64, k as i64);
    let sfx = type_suffix(if s.dtype() == DType::Bool {
        DType::U8
    } else {
        s.dtype()
    });
    let warps_per_block = 8u32;
    let warp_grid =
        (rows.div_ceil(warps_per_block as usize)).min(dev.sm_count() as usize * 32) as u32;
    // Few long rows: a block per row; many rows: a warp per row.
    let block_per_row = (rows < 2 * dev.sm_count() as usize && k > 1024) as i32;
    let (grid, block) = if block_per_row == 1 {
        (rows as u32, 1024)
    } else {
        (warp_grid, 32 * warps_per_block)
    };
    match op {
        ReduceOp::Sum => {
            let f = dev.function(&REDUCE, &format!("sum_{sfx}"))?;
            // SAFETY: x holds rows*k contiguous elements, y holds rows.
            unsafe {
                dev.launch(
                    f,
                    (grid, 1, 1),
                    block,
                    0,
                    &mut args![x, y, rows_i, k_i, block_per_row],
                )?
            };
        }
        _ => {
            let f = dev.function(&REDUCE, &format!("extreme_{sfx}"))?;
            let seek_max = op.seeks_max() as i32;
            let (yv, yi) = if op.gives_index() {
                (0u64, y)
            } else {
                (y, 0u64)
            };
            // SAFETY: as above; the unused output pointer is never written.
            unsafe {
                dev.launch(
                    f,
                    (grid, 1, 1),
                    block,
                    0,
                    &mut args![x, yv, yi, rows_i, k_i, seek_max, block_per_row],
                )?
            };
        }
    }
    Ok(out)
}

/// Rows of `s` from `offset`, [k, cols] contiguous, summed per column into `out` [cols]: two
/// passes through an accumulator-typed buffer of per-chunk partials (see reduce.cu).
fn column_sums(
    s: &CudaStorage,
    offset: usize,
    k: usize,
    cols: usize,
    out: CudaStorage,
) -> Result<CudaStorage> {
    let dev = s.cuda_device();
    // At least 256 rows a chunk, and few enough chunks for the grid's second dimension.
    let chunk = k.div_ceil(65_535).max(256).next_multiple_of(8);
    let chunks = k.div_ceil(chunk);
    let acc = match s.dtype() {
        DType::F64 => DType::F64,
        DType::BF16 | DType::F16 | DType::F32 => DType::F32,
        _ => DType::I64,
    };
    let partial = CudaStorage::alloc(dev, chunks * cols, acc)?;
    let sfx = type_suffix(if s.dtype() == DType::Bool {
        DType::U8
    } else {
        s.dtype()
    });
    let first = dev.function(&REDUCE, &format!("col_sum_partial_{sfx}"))?;
    let (x, p, y) = (s.ptr_at(offset), partial.ptr(), out.ptr());
    let (k_i, cols_i, chunk_i, chunks_i) = (k as i64, cols as i64, chunk as i64, chunks as i64);
    let grid = (cols.div_ceil(32) as u32, chunks as u32, 1);
    // SAFETY: x holds k*cols contiguous elements, p chunks*cols accumulators, y cols outputs.
    unsafe { dev.launch(first, grid, 256, 0, &mut args![x, p, k_i, cols_i, chunk_i])? };
    let second = dev.function(&REDUCE, &format!("col_sum_finish_{sfx}"))?;
    let blocks = (cols.div_ceil(256) as u32).min(dev.sm_count() * 8);
    unsafe {
        dev.launch(
            second,
            (blocks, 1, 1),
            256,
            0,
            &mut args![p, y, chunks_i, cols_i],
        )?
    };
    Ok(out)
}
