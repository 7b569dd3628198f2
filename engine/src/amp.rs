//! Mixed precision. While a low-precision dtype is set, matrix products (and convolutions) on a
//! CUDA device cast their float operands to it, so they run on tensor cores with FP32
//! accumulation in cuBLAS; everything else (norm statistics, softmax, losses, reductions, the
//! FP32 master parameters, their gradients and the optimizer state) stays in its own dtype. The
//! casts are ordinary recorded ops, so gradients flow back to the FP32 parameters in FP32.
//!
//! The CPU is left alone: it computes half types through f32 anyway, and CPU results stay the
//! exact reference for parity tests.

use crate::{DType, Device, Error, Result, Tensor};
use std::cell::Cell;

thread_local! {
    static AUTOCAST: Cell<Option<DType>> = const { Cell::new(None) };
}

/// Sets the operand dtype for matrix products on CUDA (`None` turns mixed precision off).
pub fn set_autocast(dtype: Option<DType>) -> Result<()> {
    if let Some(d) = dtype {
        if !matches!(d, DType::BF16 | DType::F16) {
            return Err(Error::invalid(
                "mixed_precision",
                format!("mixed precision takes bf16 or f16, not {d}"),
            ));
        }
    }
    AUTOCAST.with(|c| c.set(dtype));
    Ok(())
}

pub fn autocast_dtype() -> Option<DType> {
    AUTOCAST.with(|c| c.get())
}

/// Runs `f` with mixed precision set to `dtype`, restoring the previous setting after.
pub fn autocast<R>(dtype: Option<DType>, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let prev = autocast_dtype();
    set_autocast(dtype)?;
    let out = f();
    AUTOCAST.with(|c| c.set(prev));
    out
}

/// The dtype a matrix product's operands of `dtype` on `device` should be cast to, if any.
pub(crate) fn matmul_operand_dtype(device: Device, dtype: DType) -> Option<DType> {
    match (device, autocast_dtype()) {
        (Device::Cuda(_), Some(low)) if matches!(dtype, DType::F32 | DType::F64) => Some(low),
        _ => None,
    }
}

/// `t` as the matrix products under the current autocast will read it. A layer whose input
/// feeds several products (q, k and v; gate and up) casts it once here, so the products do not
/// each cast it again, and their input gradients meet in one place before the cast back.
pub fn for_products(t: &Tensor) -> Result<Tensor> {
    match matmul_operand_dtype(t.device(), t.dtype()) {
        Some(low) => t.to_dtype(low),
        None => Ok(t.clone()),
    }
}
