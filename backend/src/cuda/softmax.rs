//! softmax and log_softmax over contiguous rows (kernels/softmax.cu): short rows (up to 32) a
//! group of lanes each, aligned rows of whole 16-byte vectors in registers, any other row a
//! block each.

use super::compile::SOFTMAX;
use super::launch::{args, type_suffix};
use super::CudaStorage;
use crate::{DType, Layout, Result};

/// Rows up to this many bytes of compute values stay in shared memory during the forward.
const ROW_CACHE_BYTES: usize = 48 * 1024;

/// The register path: (vectors per thread, block size) when every row starts 16-byte aligned and
/// is a whole number of 16-byte vectors that 1024 threads can hold in at most 4 vectors each.
fn vector_plan(dtype: DType, ptrs: &[u64], cols: usize) -> Option<(u32, u32)> {
    if dtype == DType::F64 {
        return None;
    }
    let per_vec = 16 / dtype.size_in_bytes();
    if !cols.is_multiple_of(per_vec) || ptrs.iter().any(|p| !p.is_multiple_of(16)) {
        return None;
    }
    let vectors = cols / per_vec;
    // The fewest vectors per thread that keep the block at 256 threads, else up to 1024.
    for (max_v, cap) in [(1, 256), (2, 256), (4, 256), (4, 1024)] {
        let block = vectors.div_ceil(max_v).next_multiple_of(32).max(32);
        if block <= cap {
            return Some((max_v as u32, block as u32));
        }
    }
    None
}

/// Rows up to this long take the short-row kernels: a group of lanes per row.
const SHORT_ROW: usize = 32;
const SHORT_BLOCK: u32 = 256;

/// (grid, lanes per row) of the short-row kernels for `rows` rows of `cols <= SHORT_ROW`.
fn short_plan(rows: usize, cols: usize, sm_count: u32) -> (u32, i32) {
    let group = cols.next_power_of_two();
    let warps = rows.div_ceil(32 / group);
    let grid = warps
        .div_ceil((SHORT_BLOCK / 32) as usize)
        .min(sm_count as usize * 16)
        .max(1);
    (grid as u32, group as i32)
}

fn geometry(rows: usize, cols: usize, sm_count: u32) -> (u32, u32) {
    let block = if cols >= 2048 {
        512
    } else if cols >= 512 {
        256
    } else {
        128
    };
    let grid = rows.min(sm_count as usize * 32).max(1) as u32;
    (grid, block)
}

/// The view `l` of `s` is contiguous rows of `cols` elements.
pub fn softmax(s: &CudaStorage, l: &Layout, cols: usize, log: bool) -> Result<CudaStorage> {
    let dev = s.cuda_device();
    let n = l.numel();
    let out = CudaStorage::alloc(dev, n, s.dtype())?;
    if n == 0 || cols == 0 {
        return Ok(out);
    }
    let rows = n / cols;
    let sfx = type_suffix(s.dtype());
    let (x, y, lg) = (s.ptr_at(l.offset()), out.ptr(), log as i32);
    if cols <= SHORT_ROW {
        let f = dev.function(&SOFTMAX, &format!("softmax_fwd_short_{sfx}"))?;
        let (grid, group) = short_plan(rows, cols, dev.sm_count());
        let (r, c) = (rows as i64, cols as i32);
        // SAFETY: x and y hold rows*cols elements.
        unsafe {
            dev.launch(
                f,
                (grid, 1, 1),
                SHORT_BLOCK,
                0,
                &mut args![x, y, r, c, group, lg],
            )?
        };
        return Ok(out);
    }
    let (r, c) = (rows as i64, cols as i64);
    if let Some((max_v, block)) = vector_plan(s.dtype(), &[x], cols) {
        let f = dev.function(&SOFTMAX, &format!("softmax_fwd_vec{max_v}_{sfx}"))?;
        let grid = rows.min(65535 * 16) as u32;
        // SAFETY: x and y hold rows*cols elements, 16-byte aligned rows (checked by the plan).
        unsafe { dev.launch(f, (grid, 1, 1), block, 0, &mut args![x, y, r, c, lg])? };
        return Ok(out);
    }
    let f = dev.function(&SOFTMAX, &format!("softmax_fwd_{sfx}"))?;
    let compute = if s.dtype() == DType::F64 { 8 } else { 4 };
    let cached = (cols * compute <= ROW_CACHE_BYTES) as i32;
    let smem = if cached == 1 {
        (cols * compute) as u32
    } else {
        0
    };
    let (grid, block) = geometry(rows, cols, dev.sm_count());
    // SAFETY: x and y hold rows*cols elements.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            block,
            smem,
            &mut args![x, y, r, c, lg, cached],
        )?
    };
    Ok(out)
}

/// The input gradient from the saved output `y` and the output gradient `g` (same dtype),
/// both contiguous rows.
pub fn softmax_backward(
    y: &CudaStorage,
    ly: &Layout,
    g: &CudaStorage,
    lg: &Layout,
    cols: usize,
    log: bool,
) -> Result<CudaStorage> {
    let dev = y.cuda_device();
    let n = ly.numel();
    let out = CudaStorage::alloc(dev, n, y.dtype())?;
    if n == 0 || cols == 0 {
        return Ok(out);
    }
    let rows = n / cols;
    let sfx = type_suffix(y.dtype());
    let (py, pg) = (y.ptr_at(ly.offset()), g.ptr_at(lg.offset()));
    if cols <= SHORT_ROW {
        let f = dev.function(&SOFTMAX, &format!("softmax_bwd_short_{sfx}"))?;
        let (grid, group) = short_plan(rows, cols, dev.sm_count());
        let (dx, r, c, lg) = (out.ptr(), rows as i64, cols as i32, log as i32);
        // SAFETY: all three hold rows*cols elements.
        unsafe {
            dev.launch(
                f,
                (grid, 1, 1),
                SHORT_BLOCK,
                0,
                &mut args![py, pg, dx, r, c, group, lg],
            )?
        };
        return Ok(out);
    }
    if let Some((max_v, block)) = vector_plan(y.dtype(), &[py, pg], cols) {
        let f = dev.function(&SOFTMAX, &format!("softmax_bwd_vec{max_v}_{sfx}"))?;
        let (dx, r, c, lg) = (out.ptr(), rows as i64, cols as i64, log as i32);
        let grid = rows.min(65535 * 16) as u32;
        // SAFETY: all three hold rows*cols elements with 16-byte aligned rows.
        unsafe { dev.launch(f, (grid, 1, 1), block, 0, &mut args![py, pg, dx, r, c, lg])? };
        return Ok(out);
    }
    let f = dev.function(&SOFTMAX, &format!("softmax_bwd_{sfx}"))?;
    let (grid, block) = geometry(rows, cols, dev.sm_count());
    let dx = out.ptr();
    let (r, c, lg) = (rows as i64, cols as i64, log as i32);
    // SAFETY: all three hold rows*cols elements.
    unsafe { dev.launch(f, (grid, 1, 1), block, 0, &mut args![py, pg, dx, r, c, lg])? };
    Ok(out)
}
