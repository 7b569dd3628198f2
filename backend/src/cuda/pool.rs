//! max_pool2d, avg_pool2d and nearest upsampling, forward and backward (kernels/pool.cu), on
//! planes [N*C, H, W]. Backward kernels gather per input pixel, so they need no atomics and
//! repeat bit for bit.

use super::compile::POOL;
use super::copy::cast;
use super::launch::{args, grid_for, type_suffix};
use super::CudaStorage;
use crate::spec::PoolGeometry;
use crate::{DType, Layout, Result};
use std::ffi::c_void;

const BLOCK: u32 = 256;

/// Mirrors `struct PoolGeom` in kernels/pool.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct PoolGeom {
    planes: i64,
    h: i64,
    w: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    ph: i64,
    pw: i64,
    ho: i64,
    wo: i64,
}

fn geom(g: &PoolGeometry) -> PoolGeom {
    let i = |v: usize| v as i64;
    PoolGeom {
        planes: i(g.planes),
        h: i(g.h),
        w: i(g.w),
        kh: i(g.kernel.0),
        kw: i(g.kernel.1),
        sh: i(g.stride.0),
        sw: i(g.stride.1),
        ph: i(g.padding.0),
        pw: i(g.padding.1),
        ho: i(g.ho),
        wo: i(g.wo),
    }
}

/// The device address of the view's first element, packing it first when it is strided.
fn packed(s: &CudaStorage, l: &Layout, keep: &mut Option<CudaStorage>) -> Result<u64> {
    if l.is_contiguous() {
        return Ok(s.ptr_at(l.offset()));
    }
    let p = cast(s, l, s.dtype())?;
    let ptr = p.ptr();
    *keep = Some(p);
    Ok(ptr)
}

/// Launches `kernel_<dtype>` over `total` items with the given arguments.
fn launch(s: &CudaStorage, kernel: &str, total: usize, params: &mut [*mut c_void]) -> Result<()> {
    if total == 0 {
        return Ok(());
    }
    let dev = s.cuda_device();
    let f = dev.function(&POOL, &format!("{kernel}_{}", type_suffix(s.dtype())))?;
    let grid = grid_for(total, BLOCK, dev.sm_count());
    // SAFETY: callers pass arguments matching the kernel's signature, with buffers sized by
    // the geometry.
    unsafe { dev.launch(f, (grid, 1, 1), BLOCK, 0, params) }
}

/// The max-pool kernel for these sizes: the `32` variant does its index arithmetic in 32 bits,
/// which it may when every element index of input and output fits (the usual case; 64-bit
/// division made these kernels compute-bound).
fn max_pool_kernel(name: &str, g: &PoolGeometry) -> String {
    let largest = g
        .planes
        .saturating_mul(g.h.max(g.ho).saturating_mul(g.w.max(g.wo)));
    if largest < i32::MAX as usize / 2 {
        format!("{name}32")
    } else {
        name.to_string()
    }
}

/// The pooled values and, for each, the in-plane index of the input it took (I64).
pub fn max_pool2d(
    x: &CudaStorage,
    l: &Layout,
    g: &PoolGeometry,
) -> Result<(CudaStorage, CudaStorage)> {
    let dev = x.cuda_device();
    let total = g.planes * g.ho * g.wo;
    let (out, arg) = (
        CudaStorage::alloc(dev, total, x.dtype())?,
        CudaStorage::alloc(dev, total, DType::I64)?,
    );
    let mut keep = None;
    let px = packed(x, l, &mut keep)?;
    let (py, pa, pg, n) = (out.ptr(), arg.ptr(), geom(g), total as i64);
    let kernel = max_pool_kernel("max_pool_fwd", g);
    launch(x, &kernel, total, &mut args![px, py, pa, pg, n])?;
    Ok((out, arg))
}

/// dL/dx from dL/dy and the forward's argmax (contiguous I64 of dy's shape).
pub fn max_pool2d_backward(
    dy: &CudaStorage,
    l: &Layout,
    argmax: &CudaStorage,
    g: &PoolGeometry,
) -> Result<CudaStorage> {
    let total = g.planes * g.h * g.w;
    let out = CudaStorage::alloc(dy.cuda_device(), total, dy.dtype())?;
    let mut keep = None;
    let pd = packed(dy, l, &mut keep)?;
    let (pa, px, pg, n) = (argmax.ptr(), out.ptr(), geom(g), total as i64);
    let kernel = max_pool_kernel("max_pool_bwd", g);
    launch(dy, &kernel, total, &mut args![pd, pa, px, pg, n])?;
    Ok(out)
}

pub fn avg_pool2d(x: &CudaStorage, l: &Layout, g: &PoolGeometry) -> Result<CudaStorage> {
    let total = g.planes * g.ho * g.wo;
    let out = CudaStorage::alloc(x.cuda_device(), total, x.dtype())?;
    let mut keep = None;
    let px = packed(x, l, &mut keep)?;
    let (py, pg, n) = (out.ptr(), geom(g), total as i64);
    launch(x, "avg_pool_fwd", total, &mut args![px, py, pg, n])?;
    Ok(out)
}

pub fn avg_pool2d_backward(dy: &CudaStorage, l: &Layout, g: &PoolGeometry) -> Result<CudaStorage> {
    let total = g.planes * g.h * g.w;
    let out = CudaStorage::alloc(dy.cuda_device(), total, dy.dtype())?;
    let mut keep = None;
    let pd = packed(dy, l, &mut keep)?;
    let (px, pg, n) = (out.ptr(), geom(g), total as i64);
    launch(dy, "avg_pool_bwd", total, &mut args![pd, px, pg, n])?;
    Ok(out)
}

/// Planes [planes, h, w] upsampled to [planes, h*sy, w*sx].
pub fn upsample_nearest(
    x: &CudaStorage,
    l: &Layout,
    planes: usize,
    (h, w): (usize, usize),
    (sy, sx): (usize, usize),
) -> Result<CudaStorage> {
    let total = planes * h * sy * w * sx;
    let out = CudaStorage::alloc(x.cuda_device(), total, x.dtype())?;
    let mut keep = None;
    let px = packed(x, l, &mut keep)?;
    let py = out.ptr();
    let (h, w, sy, sx, n) = (h as i64, w as i64, sy as i64, sx as i64, total as i64);
    launch(
        x,
        "upsample_fwd",
        total,
        &mut args![px, py, h, w, sy, sx, n],
    )?;
    Ok(out)
}

/// The adjoint of `upsample_nearest`: each input pixel sums its sy x sx block of dy.
pub fn upsample_nearest_backward(
    dy: &CudaStorage,
    l: &Layout,
    planes: usize,
    (h, w): (usize, usize),
    (sy, sx): (usize, usize),
) -> Result<CudaStorage> {
    let total = planes * h * w;
    let out = CudaStorage::alloc(dy.cuda_device(), total, dy.dtype())?;
    let mut keep = None;
    let pd = packed(dy, l, &mut keep)?;
    let px = out.ptr();
    let (h, w, sy, sx, n) = (h as i64, w as i64, sy as i64, sx as i64, total as i64);
    launch(
        dy,
        "upsample_bwd",
        total,
        &mut args![pd, px, h, w, sy, sx, n],
    )?;
    Ok(out)
}
