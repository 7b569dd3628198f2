//! SwiGLU's gating silu(g) * u and its backward, one pass each (kernels/swiglu.cu).

use super::compile::SWIGLU;
use super::launch::{args, grid_for, type_suffix};
use super::CudaStorage;
use crate::Result;

const BLOCK: u32 = 256;

/// Elements per 16-byte group, when every pointer allows 16-byte access.
fn vector_width(ptrs: &[u64], elem: usize) -> Option<usize> {
    ptrs.iter()
        .all(|p| p.is_multiple_of(16))
        .then_some(16 / elem)
}

/// y = silu(g) * u over `n` contiguous elements starting at the given offsets.
pub fn forward(
    g: (&CudaStorage, usize),
    u: (&CudaStorage, usize),
    n: usize,
) -> Result<CudaStorage> {
    let dev = g.0.cuda_device();
    let dtype = g.0.dtype();
    let y = CudaStorage::alloc(dev, n, dtype)?;
    if n == 0 {
        return Ok(y);
    }
    let (gp, up, yp) = (g.0.ptr_at(g.1), u.0.ptr_at(u.1), y.ptr());
    let width = vector_width(&[gp, up, yp], dtype.size_in_bytes());
    let f = dev.function(&SWIGLU, &format!("swiglu_fwd_{}", type_suffix(dtype)))?;
    let (len, vec) = (n as i64, width.is_some() as i32);
    let grid = grid_for(n / width.unwrap_or(1), BLOCK, dev.sm_count());
    // SAFETY: g and u hold n elements from their offsets; y is a fresh buffer of n.
    unsafe { dev.launch(f, (grid, 1, 1), BLOCK, 0, &mut args![gp, up, yp, len, vec])? };
    Ok(y)
}

/// (dg, du) for y = silu(g) * u and the output gradient dy, all n contiguous elements.
pub fn backward(
    g: (&CudaStorage, usize),
    u: (&CudaStorage, usize),
    dy: (&CudaStorage, usize),
    n: usize,
) -> Result<(CudaStorage, CudaStorage)> {
    let dev = g.0.cuda_device();
    let dtype = g.0.dtype();
    let dg = CudaStorage::alloc(dev, n, dtype)?;
    let du = CudaStorage::alloc(dev, n, dtype)?;
    if n == 0 {
        return Ok((dg, du));
    }
    let (gp, up, dyp, dgp, dup) = (
        g.0.ptr_at(g.1),
        u.0.ptr_at(u.1),
        dy.0.ptr_at(dy.1),
        dg.ptr(),
        du.ptr(),
    );
    let width = vector_width(&[gp, up, dyp, dgp, dup], dtype.size_in_bytes());
    let f = dev.function(&SWIGLU, &format!("swiglu_bwd_{}", type_suffix(dtype)))?;
    let (len, vec) = (n as i64, width.is_some() as i32);
    let grid = grid_for(n / width.unwrap_or(1), BLOCK, dev.sm_count());
    // SAFETY: g, u and dy hold n elements from their offsets; dg and du are fresh buffers of n.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            0,
            &mut args![gp, up, dyp, dgp, dup, len, vec],
        )?
    };
    Ok((dg, du))
}
