//! Which path a fused product takes: its one GEMV kernel or the composition of the ops it
//! stands for. The rows, the dtypes, the grad mode and a few switches for measuring decide it
//! here, once, for every op in `fused_linear` and for the layer ops above (`ops::pre_norm`).

use super::plan::{plan, Plan};
use super::{check_norm, check_qkv_heads, check_weights, dense_weights, features, RotaryCache};
use super::{LINEAR_OP, QKV_CACHE_OP};
use crate::amp;
use crate::autograd::is_grad_enabled;
use crate::backend::cuda::decode_gemv as cuda;
use crate::ops::product_weight::ProductWeight;
use crate::{DType, Device, Result, Tensor};

/// The most activation rows for which the fused kernel replaces the composition, with weights
/// of `dtype` (the product's) and k columns: 4 on the tensor cores (BF16/F16), 2 otherwise.
/// Larger batches compose, where cuBLAS's GEMMs are at the bandwidth.
pub use crate::backend::cuda::decode_gemv::fused_max_rows;

/// Runs `work` (a decode step) with the promise that nothing in it writes a product's
/// weights, so each fused product may start loading its weights while the kernel before it
/// finishes (dependent launch on CUDA; no effect elsewhere).
pub fn with_fixed_weights<R>(work: impl FnOnce() -> R) -> R {
    crate::backend::cuda::decode_gemv::with_fixed_weights(work)
}

/// `fused_max_rows`, unless `RB_DECODE_FUSED_ROWS` sets another limit (read once; for
/// measuring the kernels against the composition at a batch, as docs/baseline.md does).
pub(super) fn rows_limit(k: usize, dtype: DType) -> usize {
    static OVERRIDE: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    OVERRIDE
        .get_or_init(|| std::env::var("RB_DECODE_FUSED_ROWS").ok()?.parse().ok())
        .unwrap_or_else(|| fused_max_rows(k, dtype))
}

/// The most rows whose SwiGLU gating runs in the gate/up product's epilogue; more take the
/// norm's products, then `swiglu`. Unlimited unless `RB_DECODE_PAIR_ROWS` sets a limit (read
/// once; for measuring the epilogue against the composition, as docs/baseline.md does).
pub(super) fn pair_rows_limit() -> usize {
    static OVERRIDE: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    OVERRIDE
        .get_or_init(|| std::env::var("RB_DECODE_PAIR_ROWS").ok()?.parse().ok())
        .unwrap_or(usize::MAX)
}

/// The dtype a product of an activation and a weight of these dtypes runs (and outputs) in on
/// `device`, as `matmul` chooses it: the promoted dtype, or autocast's low dtype in place of
/// F32/F64 on CUDA. With `weight` equal to `activation` it is what `amp::for_products` casts
/// an input to. The kernel path and the composition both take their dtypes from here.
pub fn product_dtype(device: Device, activation: DType, weight: DType) -> DType {
    let d = activation.promote(weight);
    amp::matmul_operand_dtype(device, d).unwrap_or(d)
}

/// Whether products with these weights record a gradient for them (training's form: the
/// weights side by side in one product each way).
pub fn trains(weights: &[&Tensor]) -> bool {
    is_grad_enabled() && weights.iter().any(|w| w.requires_grad())
}

/// Whether `x.linear_residual(weight, None)` (and the other two ops on an input of x's shape
/// and dtype) runs the fused CUDA kernel rather than the composition, under the current grad
/// mode and autocast. For tests and benchmarks: the result of either path is the same op.
pub fn runs_fused_kernel<'w>(x: &Tensor, weight: impl Into<ProductWeight<'w>>) -> Result<bool> {
    let weight = weight.into();
    let k = features(LINEAR_OP, x)?;
    check_weights(LINEAR_OP, x, k, &[weight])?;
    Ok(plan(x, k, x.dtype(), &[x], &[weight], None)?.is_some())
}

/// Whether `x.rms_norm_qkv_into_cache(norm_weight, eps, weights, head_dim, cache)` runs the
/// one kernel (products, rotation and cache write) rather than the composition, under the
/// current grad mode and autocast. For tests and benchmarks: either path is the same op.
pub fn qkv_into_cache_runs_kernel(
    x: &Tensor,
    norm_weight: &Tensor,
    weights: [&Tensor; 3],
    head_dim: usize,
    cache: &RotaryCache,
) -> Result<bool> {
    check_norm(QKV_CACHE_OP, x, norm_weight, 0.0, &dense_weights(&weights))?;
    check_qkv_heads(x, weights, head_dim)?;
    Ok(qkv_cache_plan(x, norm_weight, weights, head_dim, cache)?.is_some())
}

/// The kernel launch of `rms_norm_qkv_into_cache`, or `None` where it composes (operands
/// checked).
pub(super) fn qkv_cache_plan(
    x: &Tensor,
    norm_weight: &Tensor,
    [wq, wk, wv]: [&Tensor; 3],
    head_dim: usize,
    cache: &RotaryCache,
) -> Result<Option<Plan>> {
    let k = wq.shape()[1];
    let heads = [wq.shape()[0] / head_dim, wk.shape()[0] / head_dim];
    let normed = product_dtype(x.device(), x.dtype(), x.dtype());
    let plan = plan(
        x,
        k,
        normed,
        &[x, norm_weight],
        &dense_weights(&[wq, wk, wv]),
        None,
    )?;
    Ok(plan.filter(|p| cache.takes(p, heads, head_dim)))
}

impl RotaryCache<'_> {
    /// Whether the kernel's epilogue takes these operands after `plan`'s products (heads: q's
    /// and k's head counts): the layouts `rope::rotary_into_cache`'s kernel takes, caches of
    /// the products' dtype, and heads the tensor-core tiles can pair.
    pub(super) fn takes(&self, plan: &Plan, heads: [usize; 2], head_dim: usize) -> bool {
        let b = plan.rows;
        let table = |t: &Tensor| {
            t.dtype() == DType::F32
                && t.shape() == [b, 1, 1, head_dim]
                && t.layout().strides()[3] == 1
        };
        let cache = |c: &Tensor| {
            c.dtype() == plan.dtype
                && c.rank() == 4
                && c.shape()[..2] == [b, heads[1]]
                && c.shape()[3] == head_dim
                && c.layout().is_contiguous()
                && c.layout().offset() == 0
        };
        let device = plan.staged[0].device();
        plan.blocks.is_none()
            && cuda::rotates(plan.k, plan.dtype, head_dim)
            && plan.shapes[0] == [b, 1, heads[0] * head_dim]
            && table(self.cos)
            && table(self.sin)
            && cache(self.k_cache)
            && cache(self.v_cache)
            && self.cursor.dtype() == DType::I64
            && self.cursor.numel() == 1
            && [self.cos, self.sin, self.k_cache, self.v_cache, self.cursor]
                .iter()
                .all(|t| t.device() == device)
    }
}

/// Whether block-quantized weights take the fused kernels (else their products compose through
/// `QuantizedMatrix::matmul_t` as before). Off unless `RB_DECODE_BLOCKS=1` or
/// `set_block_products(true)`: the kernels were written in a session that lost its GPU before
/// they ran, so they stay opt-in until `cuda_decode_gemv`'s
/// `block_quantized_weights_take_the_fused_products` (which turns them on) has passed on one.
static BLOCK_PRODUCTS: std::sync::OnceLock<std::sync::atomic::AtomicBool> =
    std::sync::OnceLock::new();

pub(super) fn block_products() -> &'static std::sync::atomic::AtomicBool {
    BLOCK_PRODUCTS.get_or_init(|| {
        std::sync::atomic::AtomicBool::new(std::env::var("RB_DECODE_BLOCKS").as_deref() == Ok("1"))
    })
}

/// Turns the fused kernels for block-quantized weights on or off (see `RB_DECODE_BLOCKS`).
pub fn set_block_products(on: bool) {
    block_products().store(on, std::sync::atomic::Ordering::Relaxed);
}
