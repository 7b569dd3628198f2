//! Kernels written for f32 and f64 (pooling, convolution) run on storages of any float dtype:
//! the views are converted into contiguous f32 buffers (f64 for F64), and the result is
//! converted back to the dtype asked for.

use super::elementwise::cast;
use super::map::map;
use super::CpuStorage;
use crate::{cpu_dispatch, DType, Layout, WithDType};

/// Runs `f32k` (or `f64k` when `dtype` is F64) on float copies of `views`; its first result
/// comes back as a storage of `dtype`, its second as it is.
pub fn on_floats_with<const N: usize, E>(
    views: [(&CpuStorage, &Layout); N],
    dtype: DType,
    f32k: impl FnOnce([&[f32]; N]) -> (Vec<f32>, E),
    f64k: impl FnOnce([&[f64]; N]) -> (Vec<f64>, E),
) -> (CpuStorage, E) {
    if dtype == DType::F64 {
        let bufs = views.map(|(s, l)| values::<f64>(s, l));
        let (out, extra) = f64k(bufs.each_ref().map(Vec::as_slice));
        return (CpuStorage::F64(out), extra);
    }
    let bufs = views.map(|(s, l)| values::<f32>(s, l));
    let (out, extra) = f32k(bufs.each_ref().map(Vec::as_slice));
    let n = out.len();
    let out = CpuStorage::F32(out);
    if dtype == DType::F32 {
        (out, extra)
    } else {
        (cast(&out, &Layout::contiguous(&[n]), dtype), extra)
    }
}

/// `on_floats_with` for kernels with one result.
pub fn on_floats<const N: usize>(
    views: [(&CpuStorage, &Layout); N],
    dtype: DType,
    f32k: impl FnOnce([&[f32]; N]) -> Vec<f32>,
    f64k: impl FnOnce([&[f64]; N]) -> Vec<f64>,
) -> CpuStorage {
    on_floats_with(views, dtype, |v| (f32k(v), ()), |v| (f64k(v), ())).0
}

/// The view's values in row-major order, converted to `T` (through f64, which is exact for
/// every float dtype).
fn values<T: WithDType>(s: &CpuStorage, l: &Layout) -> Vec<T> {
    cpu_dispatch!(s, v => map(v, l, |x| T::from_f64(x.to_f64())))
}
