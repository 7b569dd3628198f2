//! The global L2 norm of many gradients, and scaling them by a clip factor worked out from that
//! norm on the device (`grad_sq_norm`, `grad_norm_finish` and `grad_scale` in optim.cu); and
//! `lerp_all`, the moving average of many tensors (`foreach_lerp`), on the same tables.

use super::plan::{plan, set_block_starts};
use super::{dtype_code, DevSlice, BLOCK};
use crate::cuda::compile::OPTIM;
use crate::cuda::launch::args;
use crate::cuda::{CudaDevice, CudaStorage};
use crate::{DType, Error, Result};
use std::sync::Arc;

/// Tensors per launch of the norm and scale kernels (`OPT_NORM_MAX`): enough that a GPT-2-sized
/// model takes one launch, since every launch ends with a partly idle tail.
pub const NORM_MAX: usize = 256;
/// Elements per block (`OPT_NORM_CHUNK`); a multiple of 4 for the kernels' float4 paths.
pub(super) const NORM_CHUNK: usize = 16384;

/// Mirrors `struct NormTable` in optim.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct NormTable {
    src: [u64; NORM_MAX],
    dst: [u64; NORM_MAX],
    numel: [i64; NORM_MAX],
    dtype: [i32; NORM_MAX],
    block_start: [i32; NORM_MAX + 1],
    n: i32,
}
const _: () = assert!(std::mem::size_of::<NormTable>() == 8200);
// Kernel parameters may take at most 32764 bytes (CUDA 12.1 and later, Volta and later).
const _: () = assert!(std::mem::size_of::<NormTable>() + 8 + 4 <= 32764);
const _: () = assert!(NORM_CHUNK.is_multiple_of(4));

impl NormTable {
    /// A table for `n` tensors, every entry still zero.
    fn new(n: usize) -> NormTable {
        NormTable {
            src: [0; NORM_MAX],
            dst: [0; NORM_MAX],
            numel: [0; NORM_MAX],
            dtype: [0; NORM_MAX],
            block_start: [0; NORM_MAX + 1],
            n: n as i32,
        }
    }
}

/// The L2 norm over all `grads` as a one-element F32 device storage, summed in F32 in a fixed
/// order (per-block partials, then one block adds those up), so it repeats bit for bit. With
/// `counters` (an optimizer's counter buffer) the final kernel also opens the step: a finite
/// norm counts as an applied step, a non-finite one is logged as skipped.
///
/// # Safety
/// Every slice must address live device memory of its size and dtype on `dev`, and `counters`
/// must be 0 or a live counter buffer (at least `COUNTER_HEAD` i64s).
pub unsafe fn grad_norm(
    dev: &Arc<CudaDevice>,
    grads: &[DevSlice],
    counters: u64,
) -> Result<CudaStorage> {
    let grads: Vec<&DevSlice> = grads.iter().filter(|g| g.numel > 0).collect();
    let numels: Vec<usize> = grads.iter().map(|g| g.numel).collect();
    let launches = plan(&numels, NORM_MAX, NORM_CHUNK)?;
    let total: i64 = launches
        .iter()
        .map(|(_, s)| *s.last().unwrap_or(&0) as i64)
        .sum();
    let count = i32::try_from(total)
        .map_err(|_| Error::invalid("grad_norm", "too many gradient elements"))?;
    let partials = CudaStorage::alloc(dev, total as usize, DType::F32)?;
    let out = CudaStorage::alloc(dev, 1, DType::F32)?;
    let f = dev.function(&OPTIM, "grad_sq_norm")?;
    let (p, mut base) = (partials.ptr(), 0i32);
    for (range, starts) in &launches {
        let mut t = NormTable::new(range.len());
        for (j, g) in grads[range.clone()].iter().enumerate() {
            t.src[j] = g.ptr;
            t.numel[j] = g.numel as i64;
            t.dtype[j] = dtype_code("grad_norm", g.dtype)?;
        }
        let blocks = set_block_starts(&mut t.block_start, starts);
        // SAFETY: the table addresses live gradients (the caller's contract); partials has
        // room for every block of every launch.
        dev.launch(f, (blocks as u32, 1, 1), BLOCK, 0, &mut args![t, p, base])?;
        base += blocks;
    }
    let finish = dev.function(&OPTIM, "grad_norm_finish")?;
    let y = out.ptr();
    // SAFETY: partials holds `count` floats, out one, counters is the caller's buffer or 0.
    dev.launch(
        finish,
        (1, 1, 1),
        1024,
        0,
        &mut args![p, count, y, counters],
    )?;
    Ok(out)
}

/// `x = lerp(x, end, weight)` for each pair (end, x address) of the same size and dtype, as
/// torch._foreach_lerp_, in as few launches as the tables allow.
///
/// # Safety
/// Every `end` must address live device memory of its size and dtype on `dev`, and each `x`
/// as many elements of that dtype, not overlapping any `end`.
pub unsafe fn lerp_all(
    dev: &Arc<CudaDevice>,
    pairs: &[(DevSlice, u64)],
    weight: f64,
) -> Result<()> {
    table_launch(dev, "foreach_lerp", "lerp", pairs, |f, blocks, t| {
        dev.launch(f, (blocks, 1, 1), BLOCK, 0, &mut args![t, weight])
    })
}

/// Launches `kernel` over (source, destination) pairs, a table of at most NORM_MAX tensors a
/// launch; `launch` gets the function, the block count and the table.
///
/// # Safety
/// The pairs must satisfy what `kernel` reads and writes (see its callers).
unsafe fn table_launch(
    dev: &Arc<CudaDevice>,
    kernel: &str,
    op: &'static str,
    pairs: &[(DevSlice, u64)],
    launch: impl Fn(cudarc::driver::sys::CUfunction, u32, NormTable) -> Result<()>,
) -> Result<()> {
    let pairs: Vec<&(DevSlice, u64)> = pairs.iter().filter(|(g, _)| g.numel > 0).collect();
    let numels: Vec<usize> = pairs.iter().map(|(g, _)| g.numel).collect();
    let f = dev.function(&OPTIM, kernel)?;
    for (range, starts) in plan(&numels, NORM_MAX, NORM_CHUNK)? {
        let mut t = NormTable::new(range.len());
        for (j, (g, dst)) in pairs[range].iter().enumerate() {
            t.src[j] = g.ptr;
            t.dst[j] = *dst;
            t.numel[j] = g.numel as i64;
            t.dtype[j] = dtype_code(op, g.dtype)?;
        }
        let blocks = set_block_starts(&mut t.block_start, &starts) as u32;
        launch(f, blocks, t)?;
    }
    Ok(())
}

/// Writes `src * clip factor` into each `dst`, where the factor is `max_norm / (norm + 1e-6)`
/// when the device `norm` is finite and above `max_norm`, else 1 (as `clip_grad_norm` on the
/// CPU). In a fused update, no clipping is a `max_norm` of infinity.
///
/// # Safety
/// Every source must address live device memory of its size and dtype, every destination room
/// for as many elements of that dtype, and `norm` one F32 on `dev`.
pub unsafe fn scale_by_norm(
    dev: &Arc<CudaDevice>,
    pairs: &[(DevSlice, u64)],
    norm: u64,
    max_norm: f64,
) -> Result<()> {
    // SAFETY: the caller's contract.
    table_launch(
        dev,
        "grad_scale",
        "clip_grad_norm",
        pairs,
        |f, blocks, t| dev.launch(f, (blocks, 1, 1), BLOCK, 0, &mut args![t, norm, max_norm]),
    )
}
