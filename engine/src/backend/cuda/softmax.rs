//! softmax and log_softmax over contiguous rows (kernels/softmax.cu).

use super::compile::SOFTMAX;
use super::launch::{args, type_suffix};
use super::CudaStorage;
use crate::{DType, Layout, Result};

/// Rows up to this many bytes of compute values stay in shared memory during the forward.
const ROW_CACHE_BYTES: usize = 48 * 1024;

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
    let f = dev.function(&SOFTMAX, &format!("softmax_fwd_{}", type_suffix(s.dtype())))?;
    let compute = if s.dtype() == DType::F64 { 8 } else { 4 };
    let cached = (cols * compute <= ROW_CACHE_BYTES) as i32;
    let smem = if cached == 1 {
        (cols * compute) as u32
    } else {
        0
    };
    let (grid, block) = geometry(rows, cols, dev.sm_count());
    let (x, y, r, c, lg) = (
        s.ptr_at(l.offset()),
        out.ptr(),
        rows as i64,
        cols as i64,
        log as i32,
    );
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
    let f = dev.function(&SOFTMAX, &format!("softmax_bwd_{}", type_suffix(y.dtype())))?;
    let (grid, block) = geometry(rows, cols, dev.sm_count());
    let (py, pg, dx) = (y.ptr_at(ly.offset()), g.ptr_at(lg.offset()), out.ptr());
    let (r, c, lg) = (rows as i64, cols as i64, log as i32);
    // SAFETY: all three hold rows*cols elements.
    unsafe { dev.launch(f, (grid, 1, 1), block, 0, &mut args![py, pg, dx, r, c, lg])? };
    Ok(out)
}
