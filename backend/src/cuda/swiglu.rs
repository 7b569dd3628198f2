//! SwiGLU's gating silu(g) * u and its backward, one pass each (kernels/swiglu.cu).

use super::compile::SWIGLU;
use super::launch::{args, grid_for, type_suffix};
use super::CudaStorage;
use crate::Result;

const BLOCK: u32 = 256;

/// The gate and up operands as the kernels read them: rows of `cols` elements, row r at
/// `r * ld` elements from each one's (storage, offset). `ld` is `cols` for contiguous operands
/// and `2 * cols` for the two halves of one fused gate/up product.
pub struct GateUp<'a> {
    pub gate: (&'a CudaStorage, usize),
    pub up: (&'a CudaStorage, usize),
    pub cols: usize,
    pub ld: usize,
}

/// The gradients of gate and up: two contiguous buffers, or one [rows, 2 * cols] buffer
/// holding dgate in each row's first half and dup in its second.
pub enum GateUpGrads {
    Separate(CudaStorage, CudaStorage),
    Packed(CudaStorage),
}

/// Whether 16-byte groups may move at once: every address aligned, and rows and row strides
/// whole groups (so no group crosses a row).
fn vectorized(ptrs: &[u64], lens: &[usize], elem: usize) -> bool {
    let group = 16 / elem;
    ptrs.iter().all(|p| p.is_multiple_of(16)) && lens.iter().all(|l| l.is_multiple_of(group))
}

/// y = silu(g) * u over `n` elements (n / cols rows), y contiguous.
pub fn forward(gu: &GateUp, n: usize) -> Result<CudaStorage> {
    let dev = gu.gate.0.cuda_device();
    let dtype = gu.gate.0.dtype();
    let y = CudaStorage::alloc(dev, n, dtype)?;
    if n == 0 {
        return Ok(y);
    }
    let (gp, up, yp) = (
        gu.gate.0.ptr_at(gu.gate.1),
        gu.up.0.ptr_at(gu.up.1),
        y.ptr(),
    );
    let vec = vectorized(&[gp, up, yp], &[gu.cols, gu.ld], dtype.size_in_bytes());
    let f = dev.function(&SWIGLU, &format!("swiglu_fwd_{}", type_suffix(dtype)))?;
    let per_thread = if vec { 16 / dtype.size_in_bytes() } else { 1 };
    let (len, cols, ld, vec) = (n as i64, gu.cols as i64, gu.ld as i64, vec as i32);
    let grid = grid_for(n / per_thread, BLOCK, dev.sm_count());
    // SAFETY: gate and up hold n / cols rows of cols elements at stride ld from their offsets;
    // y is a fresh buffer of n.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            0,
            &mut args![gp, up, yp, len, cols, ld, vec],
        )?
    };
    Ok(y)
}

/// The gradients of gate and up for y = silu(g) * u and the contiguous output gradient dy
/// (n elements), packed into one buffer when `packed`.
pub fn backward(
    gu: &GateUp,
    dy: (&CudaStorage, usize),
    n: usize,
    packed: bool,
) -> Result<GateUpGrads> {
    let dev = gu.gate.0.cuda_device();
    let dtype = gu.gate.0.dtype();
    let (grads, dgp, dup, ld_out) = if packed {
        let buf = CudaStorage::alloc(dev, 2 * n, dtype)?;
        let (dg, du) = (buf.ptr(), buf.ptr_at(gu.cols));
        (GateUpGrads::Packed(buf), dg, du, 2 * gu.cols)
    } else {
        let (dg, du) = (
            CudaStorage::alloc(dev, n, dtype)?,
            CudaStorage::alloc(dev, n, dtype)?,
        );
        let (pg, pu) = (dg.ptr(), du.ptr());
        (GateUpGrads::Separate(dg, du), pg, pu, gu.cols)
    };
    if n == 0 {
        return Ok(grads);
    }
    let (gp, up, dyp) = (
        gu.gate.0.ptr_at(gu.gate.1),
        gu.up.0.ptr_at(gu.up.1),
        dy.0.ptr_at(dy.1),
    );
    let vec = vectorized(
        &[gp, up, dyp, dgp, dup],
        &[gu.cols, gu.ld, ld_out],
        dtype.size_in_bytes(),
    );
    let f = dev.function(&SWIGLU, &format!("swiglu_bwd_{}", type_suffix(dtype)))?;
    let per_thread = if vec { 16 / dtype.size_in_bytes() } else { 1 };
    let (len, cols, ld_in, ld_out, vec) = (
        n as i64,
        gu.cols as i64,
        gu.ld as i64,
        ld_out as i64,
        vec as i32,
    );
    let grid = grid_for(n / per_thread, BLOCK, dev.sm_count());
    // SAFETY: gate and up hold n / cols rows at stride ld_in, dy n contiguous elements; the
    // gradient buffers were allocated above for n / cols rows at stride ld_out.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            0,
            &mut args![gp, up, dyp, dgp, dup, len, cols, ld_in, ld_out, vec],
        )?
    };
    Ok(grads)
}
