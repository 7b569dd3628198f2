//! Group normalization for inference in one kernel (kernels/group_norm.cu): one block per
//! (image, group), FP32 statistics, the per-channel weight and bias and an optional SiLU applied
//! as the values are written, in x's dtype and layout (NCHW or channels-last).

use super::compile::GROUP_NORM;
use super::launch::{args, type_suffix};
use super::CudaStorage;
use crate::{DType, Error, Layout, Result};

/// Threads per block (the kernel's GN_THREADS).
const THREADS: u32 = 512;

/// What one call normalizes: x [n, c, positions...] in `layout` (contiguous, or channels-last
/// for rank 4), `groups` runs of channels, F32 weight and bias [c] where given (each a
/// storage and the element offset its c values start at).
pub struct GroupNormCall<'a> {
    pub x: &'a CudaStorage,
    pub layout: &'a Layout,
    pub groups: usize,
    pub weight: Option<(&'a CudaStorage, usize)>,
    pub bias: Option<(&'a CudaStorage, usize)>,
    pub eps: f64,
    pub silu: bool,
}

/// Whether the kernel takes x in this layout and dtype: contiguous NCHW, or channels-last.
pub fn supports(layout: &Layout, dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::BF16 | DType::F16)
        && layout.rank() >= 2
        && (layout.is_contiguous() || layout.is_channels_last())
}

/// y in x's layout and dtype.
pub fn forward(call: &GroupNormCall) -> Result<CudaStorage> {
    let l = call.layout;
    let shape = l.shape();
    let dtype = call.x.dtype();
    if !supports(l, dtype) || call.groups == 0 || !shape[1].is_multiple_of(call.groups) {
        return Err(Error::invalid(
            "group_norm",
            format!(
                "the fused kernel takes contiguous or channels-last F32/BF16/F16 x [N, C, ...] with C a multiple of {} groups; got {dtype} {l:?}",
                call.groups
            ),
        ));
    }
    for (p, offset) in [call.weight, call.bias].into_iter().flatten() {
        if p.dtype() != DType::F32 || p.len() < offset + shape[1] {
            return Err(Error::invalid(
                "group_norm",
                format!(
                    "the fused kernel takes F32 weight and bias of {} channels",
                    shape[1]
                ),
            ));
        }
    }
    let dev = call.x.cuda_device();
    let total: usize = shape.iter().product();
    let y = CudaStorage::alloc(dev, total, dtype)?;
    let (n, c) = (shape[0], shape[1]);
    if total == 0 {
        return Ok(y);
    }
    let hw = (total / (n * c)) as i64;
    let channels_last = (!l.is_contiguous() && l.is_channels_last()) as i32;
    let f = dev.function(
        &GROUP_NORM,
        &format!("group_norm_fwd_{}", type_suffix(dtype)),
    )?;
    let (px, py) = (call.x.ptr_at(l.offset()), y.ptr());
    let (pw, pb) = (
        call.weight.map_or(0u64, |(w, o)| w.ptr_at(o)),
        call.bias.map_or(0u64, |(b, o)| b.ptr_at(o)),
    );
    let (c64, groups, eps, silu) = (
        c as i64,
        call.groups as i64,
        call.eps as f32,
        call.silu as i32,
    );
    let blocks = u32::try_from(n * call.groups).map_err(|_| {
        Error::invalid("group_norm", format!("{n} images x {} groups", call.groups))
    })?;
    // SAFETY: x holds n * c * hw elements of dtype from its offset in the layout the flag
    // names; weight and bias hold c F32 values or are null; y is a fresh buffer of that size.
    unsafe {
        dev.launch(
            f,
            (blocks, 1, 1),
            THREADS,
            0,
            &mut args![px, pw, pb, py, c64, hw, groups, channels_last, eps, silu],
        )?
    };
    Ok(y)
}
