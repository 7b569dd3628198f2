//! Copies, casts and fills between views on one device (kernels/copy.cu).

use super::compile::COPY;
use super::launch::{args, grid_for, type_suffix, Strided};
use super::CudaStorage;
use crate::{DType, Layout, Result};

const BLOCK: u32 = 256;

/// Writes the elements of `src` seen through `sl` into `dst` seen through `dl` (same numel),
/// converting the dtype when the two differ.
pub fn copy_view(src: &CudaStorage, sl: &Layout, dst: &CudaStorage, dl: &Layout) -> Result<()> {
    let n = sl.numel();
    if n == 0 {
        return Ok(());
    }
    let dev = src.cuda_device();
    let (xs, ys) = (Strided::of("copy", sl)?, Strided::of("copy", dl)?);
    if src.dtype() == dst.dtype() && xs.is_contiguous() && ys.is_contiguous() {
        let size = src.dtype().size_in_bytes();
        return dev.copy_device(dst.ptr_at(dl.offset()), src.ptr_at(sl.offset()), n * size);
    }
    let name = if src.dtype() == dst.dtype() {
        format!("copy_{}", src.dtype().size_in_bytes())
    } else {
        format!(
            "cast_{}_{}",
            type_suffix(src.dtype()),
            type_suffix(dst.dtype())
        )
    };
    let f = dev.function(&COPY, &name)?;
    let (x, y, n) = (src.ptr(), dst.ptr(), n as i64);
    let grid = grid_for(n as usize, BLOCK, dev.sm_count());
    // SAFETY: both views lie inside their allocations (layouts are checked when built).
    unsafe { dev.launch(f, (grid, 1, 1), BLOCK, 0, &mut args![x, xs, y, ys, n]) }
}

/// A new contiguous storage holding `s` seen through `l`, converted to `dtype`.
pub fn cast(s: &CudaStorage, l: &Layout, dtype: DType) -> Result<CudaStorage> {
    let out = CudaStorage::alloc(s.cuda_device(), l.numel(), dtype)?;
    copy_view(s, l, &out, &Layout::contiguous(l.shape()))?;
    Ok(out)
}

/// Writes `value` (converted to the storage's dtype) into the view `l` of `s`.
pub fn fill(s: &CudaStorage, l: &Layout, value: f64) -> Result<()> {
    let n = l.numel();
    if n == 0 {
        return Ok(());
    }
    let dev = s.cuda_device();
    let value = if s.dtype() == DType::Bool {
        (value != 0.0) as u8 as f64
    } else {
        value
    };
    let f = dev.function(&COPY, &format!("fill_{}", type_suffix(s.dtype())))?;
    let (y, ys, n) = (s.ptr(), Strided::of("fill", l)?, n as i64);
    let grid = grid_for(n as usize, BLOCK, dev.sm_count());
    // SAFETY: the view lies inside the allocation.
    unsafe { dev.launch(f, (grid, 1, 1), BLOCK, 0, &mut args![y, ys, value, n]) }
}

/// `n` copies of `value` on the device.
pub fn full(
    device: &std::sync::Arc<super::CudaDevice>,
    n: usize,
    dtype: DType,
    value: f64,
) -> Result<CudaStorage> {
    let out = CudaStorage::alloc(device, n, dtype)?;
    fill(&out, &Layout::contiguous(&[n]), value)?;
    Ok(out)
}
