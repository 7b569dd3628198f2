//! Mixed precision. While a low-precision dtype is set, matrix products (and convolutions) on a
//! CUDA device cast their float operands to it, so they run on tensor cores with FP32
//! accumulation in cuBLAS; everything else (norm statistics, softmax, losses, reductions, the
//! FP32 master parameters, their gradients and the optimizer state) stays in its own dtype. A
//! matrix product records itself against its uncast operands and writes each gradient in its
//! operand's dtype (an F32 weight's from cuBLAS's FP32 accumulator); the other casts are
//! ordinary recorded ops. Either way gradients reach the FP32 parameters in FP32.
//!
//! The CPU is left alone: it computes half types through f32 anyway, and CPU results stay the
//! exact reference for parity tests.
//!
//! Outside autograd, the casts of parameters (leaves that require grad, and views of them
//! such as `Linear`'s Wᵀ) are cached while the autocast setting lasts, as PyTorch's autocast
//! caches them: inference would otherwise cast every weight again on every forward (175 small
//! copies per YOLO11n batch; every weight of a transformer, 1.2 of a FLUX block's 4 ms).

use crate::{is_grad_enabled, DType, Device, Error, Result, Tensor};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

thread_local! {
    static AUTOCAST: Cell<Option<DType>> = const { Cell::new(None) };
    static CAST_CACHE: RefCell<HashMap<CastKey, CachedCast>> = RefCell::new(HashMap::new());
}

/// A parameter's storage (by address), its view's offset and a hash of its shape and strides
/// (W and its transpose Wᵀ are two entries), the target dtype and whether the copy is a
/// convolution weight in channels-last order.
type CastKey = (usize, usize, u64, DType, bool);

struct CachedCast {
    /// Held so the storage's address cannot be reused by another tensor while cached.
    source: Tensor,
    version: u64,
    cast: Tensor,
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
    if autocast_dtype() != dtype {
        CAST_CACHE.with(|c| c.borrow_mut().clear());
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
    if prev != dtype {
        CAST_CACHE.with(|c| c.borrow_mut().clear());
    }
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

/// `t` cast to `dtype` for a product under autocast. A parameter's cast is made once per
/// autocast setting and storage version when no graph is being recorded; anything else (an
/// activation, or any tensor while recording) is cast afresh.
pub(crate) fn operand(t: &Tensor, dtype: DType) -> Result<Tensor> {
    operand_cached_if(t, dtype, !is_grad_enabled())
}

/// `operand`, for a caller that records its op itself (`matmul`, against the uncast operands)
/// and so casts without recording: `cache` says whether its caller records nothing.
pub(crate) fn operand_cached_if(t: &Tensor, dtype: DType, cache: bool) -> Result<Tensor> {
    cached_operand(t, dtype, false, cache, || cast_in_memory_order(t, dtype))
}

/// `t` in `dtype`, laid out in `t`'s own memory order. A transposed matrix (the Wᵀ of x Wᵀ) is
/// cast as W and transposed back: the cast streams W's storage instead of gathering it
/// column by column into a transposed copy, the product reads it with cuBLAS's transpose
/// flag, and the gradient returns to W in W's order (`matmul`'s backward keeps it).
fn cast_in_memory_order(t: &Tensor, dtype: DType) -> Result<Tensor> {
    if t.layout().is_transposed_contiguous() && t.dtype() != dtype {
        return t.t()?.to_dtype(dtype)?.t();
    }
    t.to_dtype(dtype)
}

/// A convolution weight [O, C, kh, kw] cast to `dtype` and laid out [O, kh, kw, C] (dense),
/// as cuDNN's channels-last kernels read it; cached as `operand` is.
pub(crate) fn channels_last_weight(w: &Tensor, dtype: DType) -> Result<Tensor> {
    cached_operand(w, dtype, true, !is_grad_enabled(), || {
        w.permute(&[0, 2, 3, 1])?.to_dtype(dtype)?.contiguous()
    })
}

fn cached_operand(
    t: &Tensor,
    dtype: DType,
    channels_last: bool,
    unrecorded: bool,
    make: impl FnOnce() -> Result<Tensor>,
) -> Result<Tensor> {
    let cacheable = autocast_dtype().is_some()
        && (t.dtype() != dtype || channels_last)
        && t.is_leaf()
        && (t.requires_grad() || t.views_parameter())
        && unrecorded;
    if !cacheable {
        return make();
    }
    let view = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        t.layout().shape().hash(&mut h);
        t.layout().strides().hash(&mut h);
        h.finish()
    };
    let key = (
        std::sync::Arc::as_ptr(t.storage_cell()) as usize,
        t.layout().offset(),
        view,
        dtype,
        channels_last,
    );
    let version = t.storage_version();
    let hit = CAST_CACHE.with(|c| {
        c.borrow()
            .get(&key)
            .filter(|e| e.version == version && e.source.layout() == t.layout())
            .map(|e| e.cast.clone())
    });
    if let Some(cast) = hit {
        return Ok(cast);
    }
    let cast = make()?;
    CAST_CACHE.with(|c| {
        c.borrow_mut().insert(
            key,
            CachedCast {
                source: t.clone(),
                version,
                cast: cast.clone(),
            },
        )
    });
    Ok(cast)
}

/// `t` as the matrix products under the current autocast will read it. A layer whose input
/// feeds several products (q, k and v; gate and up) casts it once here, so the products do not
/// each cast it again, and their input gradients meet in one place before the cast back.
pub fn for_products(t: &Tensor) -> Result<Tensor> {
    t.to_dtype(products_dtype(t))
}

/// The dtype `for_products` gives `t`: autocast's low dtype for an F32/F64 tensor on CUDA
/// under autocast, its own otherwise. For an op that writes its output for the products
/// directly (`rms_norm_as`).
pub fn products_dtype(t: &Tensor) -> DType {
    matmul_operand_dtype(t.device(), t.dtype()).unwrap_or(t.dtype())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::no_grad;
    use std::sync::Arc;

    fn same_storage(a: &Tensor, b: &Tensor) -> bool {
        Arc::ptr_eq(a.storage_cell(), b.storage_cell())
    }

    fn parameter() -> Tensor {
        Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2])
            .unwrap()
            .requires_grad_()
            .unwrap()
    }

    #[test]
    fn a_parameter_is_cast_once_per_autocast_scope_outside_autograd() {
        let w = parameter();
        let (a, b) = autocast(Some(DType::F16), || {
            no_grad(|| Ok((operand(&w, DType::F16)?, operand(&w, DType::F16)?)))
        })
        .unwrap();
        assert_eq!(a.dtype(), DType::F16);
        assert!(same_storage(&a, &b));
        let c = autocast(Some(DType::F16), || no_grad(|| operand(&w, DType::F16))).unwrap();
        assert!(
            !same_storage(&a, &c),
            "the cache ends with its autocast scope"
        );
    }

    #[test]
    fn a_view_of_a_parameter_taken_outside_autograd_is_cached_as_the_parameter() {
        // Linear's forward multiplies by Wᵀ: a view, taken under no_grad, of the parameter.
        let w = parameter();
        let (a, b, c) = autocast(Some(DType::F16), || {
            no_grad(|| {
                let a = operand(&w.t()?, DType::F16)?;
                let b = operand(&w.t()?, DType::F16)?;
                let c = operand(&w, DType::F16)?;
                Ok((a, b, c))
            })
        })
        .unwrap();
        assert!(same_storage(&a, &b), "Wᵀ is cast once");
        assert_eq!(a.shape(), &[2, 2]);
        assert_eq!(a.to_vec::<f32>().unwrap(), vec![1.0, 3.0, 2.0, 4.0]);
        assert_eq!(
            c.to_vec::<f32>().unwrap(),
            vec![1.0, 2.0, 3.0, 4.0],
            "W is its own entry"
        );
        let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
        let (d, e) = autocast(Some(DType::F16), || {
            no_grad(|| Ok((operand(&x.t()?, DType::F16)?, operand(&x.t()?, DType::F16)?)))
        })
        .unwrap();
        assert!(
            !same_storage(&d, &e),
            "a view of an activation is not cached"
        );
    }

    #[test]
    fn an_updated_parameter_is_cast_again() {
        let w = parameter();
        autocast(Some(DType::F16), || {
            no_grad(|| {
                let a = operand(&w, DType::F16)?;
                w.add_scalar_(1.0)?;
                let b = operand(&w, DType::F16)?;
                assert!(!same_storage(&a, &b));
                assert_eq!(b.to_vec::<f32>()?, vec![2.0, 3.0, 4.0, 5.0]);
                Ok(())
            })
        })
        .unwrap();
    }

    #[test]
    fn casts_are_not_cached_while_recording_or_for_activations() {
        let w = parameter();
        let x = Tensor::from_vec(vec![1f32, 2.0], &[2]).unwrap();
        autocast(Some(DType::F16), || {
            let (a, b) = (operand(&w, DType::F16)?, operand(&w, DType::F16)?);
            assert!(
                !same_storage(&a, &b),
                "recording: each cast is its own graph node"
            );
            no_grad(|| {
                let (c, d) = (operand(&x, DType::F16)?, operand(&x, DType::F16)?);
                assert!(!same_storage(&c, &d), "not a parameter");
                Ok(())
            })
        })
        .unwrap();
    }
}
