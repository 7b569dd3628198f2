//! Fused cross-entropy over contiguous logits [rows, cols] with i64 targets (kernels/loss.cu).
//! A target out of range (and not ignore_index) sets the device error word, reported at the
//! next host read, instead of a host round trip per call.

use super::compile::LOSS;
use super::launch::{args, type_suffix};
use super::CudaStorage;
use crate::spec::CrossEntropySpec;
use crate::{DType, Result};

/// Per-row loss, logsumexp and 1/0 for rows that count toward the mean (compute dtype).
pub struct CrossEntropyRows {
    pub loss: CudaStorage,
    pub lse: CudaStorage,
    pub valid: CudaStorage,
}

/// `x` holds rows*cols logits from `x_offset`; `t` points at `rows` i64 targets.
pub fn cross_entropy_forward(
    x: &CudaStorage,
    x_offset: usize,
    t: u64,
    spec: CrossEntropySpec,
) -> Result<CrossEntropyRows> {
    let dev = x.cuda_device();
    let cdt = x.dtype().compute_dtype();
    let loss = CudaStorage::alloc(dev, spec.rows, cdt)?;
    let lse = CudaStorage::alloc(dev, spec.rows, cdt)?;
    let valid = CudaStorage::alloc(dev, spec.rows, cdt)?;
    if spec.rows > 0 {
        let f = dev.function(&LOSS, &format!("ce_fwd_{}", type_suffix(x.dtype())))?;
        let (grid, block) = row_geometry(spec, dev.sm_count());
        let (px, pl, pe, pv, err) = (
            x.ptr_at(x_offset),
            loss.ptr(),
            lse.ptr(),
            valid.ptr(),
            dev.error_word(),
        );
        let (rows, cols, ignore, smoothing) = (
            spec.rows as i64,
            spec.cols as i64,
            spec.ignore,
            spec.smoothing,
        );
        // SAFETY: x holds rows*cols logits, t rows i64s, the outputs rows compute values each;
        // err is the device's 4-byte error word.
        unsafe {
            dev.launch(
                f,
                (grid, 1, 1),
                block,
                0,
                &mut args![px, t, pl, pe, pv, rows, cols, ignore, smoothing, err],
            )?
        };
    }
    Ok(CrossEntropyRows { loss, lse, valid })
}

/// Both kernels give each row a block: (grid, block) for the row count and length.
fn row_geometry(spec: CrossEntropySpec, sm_count: u32) -> (u32, u32) {
    let block = match spec.cols {
        c if c >= 4096 => 512,
        c if c >= 1024 => 256,
        c if c >= 256 => 128,
        _ => 32,
    };
    (spec.rows.min(sm_count as usize * 32) as u32, block)
}

/// The logits' gradient in `out` (their own dtype, or BF16/F16 from F32 logits). `g` is the
/// gradient of each row's loss and `lse` the forward's logsumexp, both `rows` contiguous compute
/// values.
pub fn cross_entropy_backward(
    x: &CudaStorage,
    x_offset: usize,
    t: u64,
    lse: &CudaStorage,
    g: u64,
    spec: CrossEntropySpec,
    out: DType,
) -> Result<CudaStorage> {
    let dev = x.cuda_device();
    let n = spec.rows * spec.cols;
    let dx = CudaStorage::alloc(dev, n, out)?;
    if n > 0 {
        let name = match (x.dtype(), out) {
            (a, b) if a == b => format!("ce_bwd_{}", type_suffix(a)),
            (DType::F32, DType::BF16 | DType::F16) => format!("ce_bwd_f32_{}", type_suffix(out)),
            (a, b) => {
                return Err(crate::Error::invalid(
                    "cross_entropy",
                    format!("no gradient kernel from {a} logits to {b}"),
                ))
            }
        };
        let f = dev.function(&LOSS, &name)?;
        let (grid, block) = row_geometry(spec, dev.sm_count());
        let (px, pe, pd) = (x.ptr_at(x_offset), lse.ptr(), dx.ptr());
        let (rows, cols, ignore, smoothing) = (
            spec.rows as i64,
            spec.cols as i64,
            spec.ignore,
            spec.smoothing,
        );
        // SAFETY: x and dx hold rows*cols elements, t, lse and g hold rows.
        unsafe {
            dev.launch(
                f,
                (grid, 1, 1),
                block,
                0,
                &mut args![px, t, pe, g, pd, rows, cols, ignore, smoothing],
            )?
        };
    }
    Ok(dx)
}
