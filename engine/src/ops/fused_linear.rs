//! Fused products for decoding: the norm, gating and residual add around a layer's linear
//! maps, as one op each, so a decode step launches about a third of the kernels.
//!
//! - `rms_norm_linears`: rms_norm(x) then a product with each of several weights (q, k, v;
//!   gate, up), which share the normed input.
//! - `swiglu_linear`: silu(gate) * up times a weight (down), plus the residual.
//! - `linear_residual`: x times a weight (o), plus the residual.
//! - `rms_norm_qkv_into_cache`: a decode step's q/k/v products after the norm, with q and k
//!   rotated and k and v written into the key/value caches in the products' epilogue.
//!
//! Weights are [n, k] as `Linear` holds them (y = x Wᵀ): dense tensors, or block-quantized
//! matrices (`ProductWeight`; Q4_K takes the kernel, as BF16 products). On CUDA, for at most
//! `fused_max_rows` rows (backend/cuda/decode_gemv.rs) and when no gradient is needed, each op is one GEMV launch
//! that reads every weight once; otherwise it is the composition of the ops the model runs
//! (which records autograd as usual). Both choose the same dtypes (`product_dtype`), and the
//! kernel rounds where the composition materializes a tensor, so the two differ only in the
//! order of float sums: the norm's sum of squares and the dot products (F32 accumulators in
//! both). Numerically the kernel path equals the composition on CUDA: the norm and the
//! gating computed in F32 and rounded to the input's dtype, then to the product's dtype; the
//! product rounded to its dtype; the residual added in F32 and rounded to the add's dtype.
//! An F32 product while TF32 is allowed stays on cuBLAS, whose TF32 rounding the kernel
//! does not copy.

use super::dispatch::{dispatch_all, CudaOperand};
use super::index::cat_rows_as;
use super::matmul::product_in;
use super::product_weight::{all_dense, ProductWeight};
use super::{backward_fn, grad_if};
use crate::amp;
use crate::autograd::{is_grad_enabled, no_grad, SavedTensor};
use crate::backend::cuda::decode_gemv::{
    self as cuda, At, Epilogue, Prologue, RotaryWrite, Weights,
};
use crate::backend::cuda::quant_matmul::BlockFormat;
use crate::backend::cuda::rope::CacheSlot;
use crate::backend::Storage;
use crate::{DType, Device, Error, Result, Tensor};

const NORM_OP: &str = "rms_norm_linears";
const NORM_SWIGLU_OP: &str = "rms_norm_swiglu";
const SWIGLU_OP: &str = "swiglu_linear";
const LINEAR_OP: &str = "linear_residual";
const LINEARS_OP: &str = "linears";
const QKV_CACHE_OP: &str = "rms_norm_qkv_into_cache";

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
fn rows_limit(k: usize, dtype: DType) -> usize {
    static OVERRIDE: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    OVERRIDE
        .get_or_init(|| std::env::var("RB_DECODE_FUSED_ROWS").ok()?.parse().ok())
        .unwrap_or_else(|| fused_max_rows(k, dtype))
}

/// The most rows whose SwiGLU gating runs in the gate/up product's epilogue; more take the
/// norm's products, then `swiglu`. Unlimited unless `RB_DECODE_PAIR_ROWS` sets a limit (read
/// once; for measuring the epilogue against the composition, as docs/baseline.md does).
fn pair_rows_limit() -> usize {
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

impl Tensor {
    /// rms_norm(self, norm_weight, eps), cast for the products as a layer casts it, times
    /// each Wᵢᵀ: self [.., k], each weight [nᵢ, k]; returns [.., nᵢ] for each weight.
    pub fn rms_norm_linears<'w, W: Into<ProductWeight<'w>> + Copy>(
        &self,
        norm_weight: &Tensor,
        eps: f64,
        weights: &[W],
    ) -> Result<Vec<Tensor>> {
        let weights: Vec<ProductWeight> = weights.iter().map(|&w| w.into()).collect();
        let k = check_norm(NORM_OP, self, norm_weight, eps, &weights)?;
        // The normed input is materialized in x's dtype, then cast for the products.
        let normed = product_dtype(self.device(), self.dtype(), self.dtype());
        if let Some(plan) = plan(self, k, normed, &[self, norm_weight], &weights, None)? {
            return plan.run(NORM_OP, Kind::Norm(eps), Finish::Store);
        }
        let normed = self.rms_norm_as(Some(norm_weight), eps, amp::products_dtype(self))?;
        match all_dense(&weights) {
            Some(dense) => normed.linears(&dense),
            None => weights.iter().map(|w| w.product(&normed)).collect(),
        }
    }

    /// self Wᵢᵀ for each weight [nᵢ, k], as a layer's products of one input (q/k/v, or
    /// gate/up): returns [.., nᵢ] for each weight.
    pub fn linears(&self, weights: &[&Tensor]) -> Result<Vec<Tensor>> {
        let k = features(LINEARS_OP, self)?;
        check_weights(LINEARS_OP, self, k, &dense_weights(weights))?;
        // Training: one product with the weights side by side, split into views. cuBLAS runs
        // one wide GEMM instead of several narrow ones each way, and the input's gradient is
        // one product rather than a sum of several. Without gradients the separate products
        // skip the weights' concatenation.
        if trains(weights) && weights.len() > 1 {
            let sizes: Vec<usize> = weights.iter().map(|w| w.shape()[0]).collect();
            return self.linears_joined(weights)?.split_with_sizes(&sizes, -1);
        }
        weights
            .iter()
            .map(|&w| ProductWeight::Dense(w).product(self))
            .collect()
    }

    /// self [.., k] times the weights [nᵢ, k] side by side: [.., Σnᵢ], one product. What
    /// `linears` splits while training; a caller that splits it itself (q/k/v with their
    /// rotation, `rotary_qkv`) takes it whole.
    ///
    /// Under autocast the weights are cast into one low-precision operand side by side, each in
    /// one pass (the cast autocast makes anyway), and the product is recorded against the
    /// weights themselves: no F32 concatenation each way, and each weight's gradient is a
    /// block of one F32 product.
    pub fn linears_joined(&self, weights: &[&Tensor]) -> Result<Tensor> {
        let k = features(LINEARS_OP, self)?;
        check_weights(LINEARS_OP, self, k, &dense_weights(weights))?;
        let w_dtype = weights[0].dtype();
        let low = product_dtype(self.device(), self.dtype(), w_dtype);
        if low == w_dtype || weights.iter().any(|w| w.dtype() != w_dtype) {
            let fused = Tensor::cat(&weights.iter().map(|&w| w.clone()).collect::<Vec<_>>(), 0)?;
            return ProductWeight::Dense(&fused).product(self);
        }
        let (x, w) = no_grad(|| -> Result<_> {
            let rows = self.shape()[..self.rank() - 1].iter().product();
            let x = self.reshape_to(&[rows, k])?.to_dtype(low)?;
            Ok((x, cat_rows_as(weights, low)?))
        })?;
        let y = no_grad(|| x.matmul(&w.t()?))?;
        let mut shape = self.shape().to_vec();
        shape[self.rank() - 1] = w.shape()[0];
        let y = y.reshape_to(&shape)?;
        let inputs: Vec<&Tensor> = std::iter::once(self)
            .chain(weights.iter().copied())
            .collect();
        let rows: Vec<usize> = weights.iter().map(|w| w.shape()[0]).collect();
        let (x_shape, x_dtype) = (self.shape().to_vec(), self.dtype());
        Ok(y.recorded(&inputs, move || {
            let (sx, sw) = (
                SavedTensor::new(LINEARS_OP, &x),
                SavedTensor::new(LINEARS_OP, &w),
            );
            backward_fn(LINEARS_OP, move |g, needs| {
                let (x, w) = (sx.get()?, sw.get()?);
                let g = g
                    .reshape_to(&[x.shape()[0], w.shape()[0]])?
                    .to_dtype(x.dtype())?;
                let mut grads = Vec::with_capacity(needs.len());
                grads.push(grad_if(needs[0], || {
                    product_in(&g, w, x_dtype)?.reshape_to(&x_shape)
                })?);
                if needs[1..].iter().any(|&n| n) {
                    // One product for every weight's gradient, in the weights' dtype; each
                    // weight takes its block of rows (a contiguous view).
                    let dw = product_in(&g.t()?, x, w_dtype)?;
                    let mut start = 0;
                    for (&n, &need) in rows.iter().zip(&needs[1..]) {
                        grads.push(need.then(|| dw.narrow(0, start, n)).transpose()?);
                        start += n;
                    }
                } else {
                    grads.extend(rows.iter().map(|_| None));
                }
                Ok(grads)
            })
        }))
    }

    /// SwiGLU's gated input from a norm: silu(n Gᵀ) * (n Uᵀ) where n is rms_norm(self,
    /// norm_weight, eps) cast for the products: self [.., k], gate and up [n, k]; returns
    /// [.., n]. In a decode step both products and the gating are one kernel, which stores
    /// only the gated values; otherwise `rms_norm_linears`, then `swiglu`.
    pub fn rms_norm_swiglu<'w>(
        &self,
        norm_weight: &Tensor,
        eps: f64,
        gate: impl Into<ProductWeight<'w>>,
        up: impl Into<ProductWeight<'w>>,
    ) -> Result<Tensor> {
        let (gate, up) = (gate.into(), up.into());
        let k = check_norm(NORM_SWIGLU_OP, self, norm_weight, eps, &[gate, up])?;
        if gate.shape() != up.shape() {
            return Err(Error::ShapeMismatch {
                op: NORM_SWIGLU_OP,
                lhs: gate.shape(),
                rhs: up.shape(),
            });
        }
        let normed = product_dtype(self.device(), self.dtype(), self.dtype());
        if let Some(plan) = plan(self, k, normed, &[self, norm_weight], &[gate, up], None)? {
            let pairs = plan.blocks.is_some() || cuda::pairs_gate_and_up(k, plan.dtype);
            if pairs && plan.rows <= pair_rows_limit() {
                return plan
                    .run(NORM_SWIGLU_OP, Kind::Norm(eps), Finish::Gated)
                    .map(single);
            }
        }
        let gu = self.rms_norm_linears(norm_weight, eps, &[gate, up])?;
        gu[0].swiglu(&gu[1])
    }

    /// silu(self) * up (SwiGLU's gating, self being the gate) times Wᵀ, plus `residual`:
    /// self and up [.., k], weight [n, k], residual [.., n]; returns [.., n].
    pub fn swiglu_linear<'w>(
        &self,
        up: &Tensor,
        weight: impl Into<ProductWeight<'w>>,
        residual: Option<&Tensor>,
    ) -> Result<Tensor> {
        let weight = weight.into();
        let k = features(SWIGLU_OP, self)?;
        check_float(SWIGLU_OP, &[up])?;
        super::swiglu::check_gate_up(SWIGLU_OP, self, up)?;
        check_weights(SWIGLU_OP, self, k, &[weight])?;
        check_residual(SWIGLU_OP, self, &weight, residual)?;
        if let Some(plan) = plan(self, k, self.dtype(), &[self, up], &[weight], residual)? {
            return plan.run(SWIGLU_OP, Kind::Swiglu, Finish::Store).map(single);
        }
        let y = weight.product(&self.swiglu(up)?)?;
        add_residual(residual, y)
    }

    /// self Wᵀ plus `residual`: self [.., k], weight [n, k], residual [.., n]; returns [.., n].
    pub fn linear_residual<'w>(
        &self,
        weight: impl Into<ProductWeight<'w>>,
        residual: Option<&Tensor>,
    ) -> Result<Tensor> {
        let weight = weight.into();
        let k = features(LINEAR_OP, self)?;
        check_weights(LINEAR_OP, self, k, &[weight])?;
        check_residual(LINEAR_OP, self, &weight, residual)?;
        if let Some(plan) = plan(self, k, self.dtype(), &[self], &[weight], residual)? {
            return plan.run(LINEAR_OP, Kind::Plain, Finish::Store).map(single);
        }
        add_residual(residual, weight.product(self)?)
    }

    /// One decode step's queries, with its keys and values put into the caches:
    /// rms_norm_linears(self, norm_weight, eps, [wq, wk, wv]), split into heads of `head_dim`,
    /// q and k rotated by the F32 tables cos and sin [B, 1, 1, head_dim], and k and v written
    /// at the cursor's position (`rope::rotary_into_cache`). self is [B, 1, d]; returns q
    /// rotated, [B, heads, 1, head_dim]. On CUDA with tensor-core weights this is one kernel:
    /// the products' epilogue rotates and writes, and neither k nor v is materialized.
    pub fn rms_norm_qkv_into_cache(
        &self,
        norm_weight: &Tensor,
        eps: f64,
        [wq, wk, wv]: [&Tensor; 3],
        head_dim: usize,
        cache: RotaryCache,
    ) -> Result<Tensor> {
        check_norm(
            QKV_CACHE_OP,
            self,
            norm_weight,
            eps,
            &dense_weights(&[wq, wk, wv]),
        )?;
        let heads = check_qkv_heads(self, [wq, wk, wv], head_dim)?;
        if let Some(plan) = qkv_cache_plan(self, norm_weight, [wq, wk, wv], head_dim, &cache)? {
            let finish = Finish::Rotary { cache, head_dim };
            return plan.run(QKV_CACHE_OP, Kind::Norm(eps), finish).map(single);
        }
        let qkv = self.rms_norm_linears(norm_weight, eps, &[wq, wk, wv])?;
        let split = |t: &Tensor, n: usize| t.unflatten(-1, &[n, head_dim])?.transpose(1, 2);
        let (q, k) = (split(&qkv[0], heads[0])?, split(&qkv[1], heads[1])?);
        let v = split(&qkv[2], heads[1])?.to_dtype(k.dtype())?;
        let RotaryCache {
            cos,
            sin,
            k_cache,
            v_cache,
            cursor,
        } = cache;
        super::rope::rotary_into_cache(&q, &k, &v, cos, sin, k_cache, v_cache, cursor)
    }
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
fn qkv_cache_plan(
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

/// Where `rms_norm_qkv_into_cache` rotates and writes: the F32 angle tables cos and sin
/// [B, 1, 1, head_dim], the caches [B, kv_heads, capacity, head_dim], and the I64 cursor [1]
/// naming the position the step writes.
#[derive(Clone, Copy)]
pub struct RotaryCache<'a> {
    pub cos: &'a Tensor,
    pub sin: &'a Tensor,
    pub k_cache: &'a Tensor,
    pub v_cache: &'a Tensor,
    pub cursor: &'a Tensor,
}

impl RotaryCache<'_> {
    /// Whether the kernel's epilogue takes these operands after `plan`'s products (heads: q's
    /// and k's head counts): the layouts `rope::rotary_into_cache`'s kernel takes, caches of
    /// the products' dtype, and heads the tensor-core tiles can pair.
    fn takes(&self, plan: &Plan, heads: [usize; 2], head_dim: usize) -> bool {
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

/// q's and k's head counts for `rms_norm_qkv_into_cache`, after checking x is [B, 1, d] and
/// the weights' rows are whole heads of `head_dim` (k and v alike).
fn check_qkv_heads(x: &Tensor, [wq, wk, wv]: [&Tensor; 3], head_dim: usize) -> Result<[usize; 2]> {
    if x.rank() != 3 || x.shape()[1] != 1 {
        return Err(Error::invalid(
            QKV_CACHE_OP,
            format!(
                "takes one decode step's stream [B, 1, d], got {:?}",
                x.shape()
            ),
        ));
    }
    let (nq, nk, nv) = (wq.shape()[0], wk.shape()[0], wv.shape()[0]);
    if head_dim == 0 || !nq.is_multiple_of(head_dim) || !nk.is_multiple_of(head_dim) || nk != nv {
        return Err(Error::invalid(
            QKV_CACHE_OP,
            format!(
                "q, k and v of {nq}, {nk} and {nv} rows are not whole heads of {head_dim} with k and v alike"
            ),
        ));
    }
    Ok([nq / head_dim, nk / head_dim])
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

fn dense_weights<'a>(weights: &[&'a Tensor]) -> Vec<ProductWeight<'a>> {
    weights.iter().map(|&w| ProductWeight::Dense(w)).collect()
}

/// residual + y, as a block adds a layer's output to its stream.
fn add_residual(residual: Option<&Tensor>, y: Tensor) -> Result<Tensor> {
    match residual {
        Some(r) => r.add(&y),
        None => Ok(y),
    }
}

fn single(mut v: Vec<Tensor>) -> Tensor {
    v.swap_remove(0)
}

/// x's feature count k (its last dim), after checking x is a float tensor of rank >= 1.
fn features(op: &'static str, x: &Tensor) -> Result<usize> {
    check_float(op, &[x])?;
    match x.shape().last() {
        Some(&k) => Ok(k),
        None => Err(Error::invalid(
            op,
            "needs an input with at least one dim, got a scalar",
        )),
    }
}

/// The checks of the norm ops: x's features k (returned), the weights [.., k], the norm
/// weight [k] on x's device, and eps.
fn check_norm(
    op: &'static str,
    x: &Tensor,
    norm_weight: &Tensor,
    eps: f64,
    weights: &[ProductWeight],
) -> Result<usize> {
    let k = features(op, x)?;
    check_weights(op, x, k, weights)?;
    check_float(op, &[norm_weight])?;
    x.check_same_device(op, norm_weight)?;
    if norm_weight.shape() != [k] {
        return Err(Error::invalid(
            op,
            format!(
                "the norm weight {:?} must be [{k}] for x {:?}",
                norm_weight.shape(),
                x.shape()
            ),
        ));
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(
            op,
            format!("eps must be finite and >= 0, got {eps}"),
        ));
    }
    Ok(k)
}

fn check_float(op: &'static str, ts: &[&Tensor]) -> Result<()> {
    ts.iter().try_for_each(|t| t.check_float(op))
}

/// Each weight [n, k] (of a float dtype if dense), on x's device, and at least one.
fn check_weights(op: &'static str, x: &Tensor, k: usize, weights: &[ProductWeight]) -> Result<()> {
    if weights.is_empty() {
        return Err(Error::invalid(op, "needs at least one weight"));
    }
    weights
        .iter()
        .enumerate()
        .try_for_each(|(i, w)| w.check(op, x, k, i))
}

/// The residual, if any: a float tensor on x's device with the output's shape [.., n].
fn check_residual(
    op: &'static str,
    x: &Tensor,
    weight: &ProductWeight,
    residual: Option<&Tensor>,
) -> Result<()> {
    let Some(r) = residual else { return Ok(()) };
    r.check_float(op)?;
    x.check_same_device(op, r)?;
    let out = output_shape(x, weight.shape()[0]);
    if r.shape() != out {
        return Err(Error::invalid(
            op,
            format!(
                "the residual {:?} must have the output's shape {out:?} (input {:?}, weight {:?})",
                r.shape(),
                x.shape(),
                weight.shape()
            ),
        ));
    }
    Ok(())
}

/// x's shape with the last dim replaced by n.
fn output_shape(x: &Tensor, n: usize) -> Vec<usize> {
    let mut shape = x.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = n;
    }
    shape
}

/// What the kernel computes before the products; its inputs are the plan's `staged` tensors
/// (x and the norm weight, gate and up, or x).
#[derive(Clone, Copy)]
enum Kind {
    Norm(f64),
    Swiglu,
    Plain,
}

/// What the kernel does with the products (the residual, if any, comes with the plan).
enum Finish<'a> {
    /// One output per weight.
    Store,
    /// silu(y_0) * y_1 of two weights, one output.
    Gated,
    /// q rotated, one output [B, heads, 1, head_dim]; k rotated and v into the caches.
    Rotary {
        cache: RotaryCache<'a>,
        head_dim: usize,
    },
}

/// A kernel launch decided on: the prologue's inputs and the residual (contiguous), the
/// weights in the product's dtype, and the output shapes.
struct Plan {
    rows: usize,
    k: usize,
    staged: Vec<Tensor>,
    /// Dense weights in the product's dtype, or the blocks (U8) of quantized ones.
    weights: Vec<Tensor>,
    /// The weights' rows.
    widths: Vec<usize>,
    /// The quantized weights' format; `None` for dense ones.
    blocks: Option<BlockFormat>,
    residual: Option<Tensor>,
    shapes: Vec<Vec<usize>>,
    dtype: DType,
}

/// The kernel launch for these operands, or `None` where the composition runs: not CUDA, a
/// gradient needed, a dtype or layout the kernels do not take, or what `dense_operands` or
/// `block_operands` refuses (too many rows, rows beyond shared memory). `activation` is the dtype of the tensor the composition multiplies
/// (the normed or gated input); `staged` are the prologue's inputs (x, or gate and up, and
/// the norm weight), read 16 bytes at a time. Strided inputs and residuals (a few rows) are
/// copied contiguous; weights must be contiguous already (a copy would cost more than the
/// composition).
fn plan(
    x: &Tensor,
    k: usize,
    activation: DType,
    staged: &[&Tensor],
    weights: &[ProductWeight],
    residual: Option<&Tensor>,
) -> Result<Option<Plan>> {
    let Device::Cuda(ordinal) = x.device() else {
        return Ok(None);
    };
    let dense = all_dense(weights);
    let mut all = staged
        .iter()
        .chain(dense.iter().flatten())
        .chain(residual.iter());
    if is_grad_enabled() && all.any(|t| t.requires_grad()) {
        return Ok(None);
    }
    let rows = x.numel().checked_div(k).unwrap_or(0);
    let dev = crate::backend::cuda::device(ordinal)?;
    let taken = |t: &Tensor| matches!(t.dtype(), DType::F32 | DType::BF16 | DType::F16);
    if !staged.iter().chain(residual.iter()).all(|t| taken(t)) {
        return Ok(None);
    }
    let operands = match dense {
        Some(dense) => {
            dense_operands(x, k, activation, rows, &dense, &dev)?.map(|(w, dtype)| (w, dtype, None))
        }
        None => block_operands(k, activation, rows, weights, &dev)
            .map(|(w, format)| (w, DType::BF16, Some(format))),
    };
    let Some((products, dtype, blocks)) = operands else {
        return Ok(None);
    };
    let Some((staged, residual)) = laid_out(staged, residual, &products)? else {
        return Ok(None);
    };
    let widths: Vec<usize> = weights.iter().map(|w| w.shape()[0]).collect();
    let shapes = widths.iter().map(|&n| output_shape(x, n)).collect();
    Ok(Some(Plan {
        rows,
        k,
        staged,
        weights: products,
        widths,
        blocks,
        residual,
        shapes,
        dtype,
    }))
}

/// The dense weights as the kernel takes them, in the product's dtype (returned), or `None`
/// where they compose: too many rows, mixed dtypes, an F32 product while TF32 is allowed, a
/// strided weight, or rows beyond shared memory.
fn dense_operands(
    x: &Tensor,
    k: usize,
    activation: DType,
    rows: usize,
    weights: &[&Tensor],
    dev: &crate::backend::cuda::CudaDevice,
) -> Result<Option<(Vec<Tensor>, DType)>> {
    let dtype = product_dtype(x.device(), activation, weights[0].dtype());
    let one_dtype = weights
        .iter()
        .all(|w| product_dtype(x.device(), activation, w.dtype()) == dtype);
    let fits = rows <= rows_limit(k, dtype)
        && one_dtype
        && !(dtype == DType::F32 && dev.allow_tf32())
        && weights.iter().all(|w| w.is_contiguous())
        && cuda::supports(dev, rows, k, dtype)?;
    if !fits {
        return Ok(None);
    }
    // Outside autograd a parameter's cast is cached for the autocast scope, as matmul's is.
    let weights = weights
        .iter()
        .map(|w| amp::operand(w, dtype))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some((weights, dtype)))
}

/// The staged inputs and the residual made contiguous (a few rows: copied where strided),
/// or `None` where they or the weights do not start on the 16 bytes the kernels load at once
/// (weights are not copied: that would cost more than the composition).
fn laid_out(
    staged: &[&Tensor],
    residual: Option<&Tensor>,
    weights: &[Tensor],
) -> Result<Option<(Vec<Tensor>, Option<Tensor>)>> {
    let contiguous = |t: &Tensor| no_grad(|| t.contiguous());
    let aligned = |t: &Tensor| (t.layout().offset() * t.dtype().size_in_bytes()).is_multiple_of(16);
    let staged = staged
        .iter()
        .map(|t| contiguous(t))
        .collect::<Result<Vec<_>>>()?;
    let residual = residual.map(contiguous).transpose()?;
    let fits = staged
        .iter()
        .chain(weights)
        .all(|t| t.is_contiguous() && aligned(t));
    Ok(fits.then_some((staged, residual)))
}

/// Whether block-quantized weights take the fused kernels (else their products compose through
/// `QuantizedMatrix::matmul_t` as before). Off unless `RB_DECODE_BLOCKS=1` or
/// `set_block_products(true)`: the kernels were written in a session that lost its GPU before
/// they ran, so they stay opt-in until `cuda_decode_gemv`'s
/// `block_quantized_weights_take_the_fused_products` (which turns them on) has passed on one.
static BLOCK_PRODUCTS: std::sync::OnceLock<std::sync::atomic::AtomicBool> =
    std::sync::OnceLock::new();

fn block_products() -> &'static std::sync::atomic::AtomicBool {
    BLOCK_PRODUCTS.get_or_init(|| {
        std::sync::atomic::AtomicBool::new(std::env::var("RB_DECODE_BLOCKS").as_deref() == Ok("1"))
    })
}

/// Turns the fused kernels for block-quantized weights on or off (see `RB_DECODE_BLOCKS`).
pub fn set_block_products(on: bool) {
    block_products().store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The blocks (U8) of block-quantized weights as the kernel takes them, and their format, or
/// `None` where they compose: the kernels off (`RB_DECODE_BLOCKS`), a dense weight among them,
/// mixed formats, an activation other than BF16 (the composition's product runs in the
/// activation's dtype, BF16 through the int8 GEMV), or what `supports_blocks` refuses.
fn block_operands(
    k: usize,
    activation: DType,
    rows: usize,
    weights: &[ProductWeight],
    dev: &crate::backend::cuda::CudaDevice,
) -> Option<(Vec<Tensor>, BlockFormat)> {
    let blocks: Vec<_> = weights
        .iter()
        .map(|w| match w {
            ProductWeight::Blocks(q) => Some(q),
            ProductWeight::Dense(_) => None,
        })
        .collect::<Option<_>>()?;
    let format = blocks[0].format();
    let fits = block_products().load(std::sync::atomic::Ordering::Relaxed)
        && activation == DType::BF16
        && blocks.iter().all(|q| q.format() == format)
        && cuda::supports_blocks(dev, rows, k, blocks.len(), format);
    fits.then(|| (blocks.iter().map(|q| q.blocks().clone()).collect(), format))
}

impl Plan {
    /// Launches the kernel: one output per weight, of the product's dtype, or of the residual
    /// add's (the residual's and the product's promoted) with a residual; or what `finish`
    /// says.
    fn run(self, op: &'static str, kind: Kind, finish: Finish) -> Result<Vec<Tensor>> {
        let out_dtype = self
            .residual
            .as_ref()
            .map_or(self.dtype, |r| r.dtype().promote(self.dtype));
        let (ns, nw) = (self.staged.len(), self.weights.len());
        // The rotary epilogue also reads the tables and the cursor, and writes the caches
        // (locked for writing below; `takes` checked their layouts).
        let rotary = match &finish {
            Finish::Rotary { cache, .. } => {
                cache.k_cache.check_inplace(op)?;
                cache.v_cache.check_inplace(op)?;
                vec![cache.cos, cache.sin, cache.cursor]
            }
            _ => Vec::new(),
        };
        let operands: Vec<&Tensor> = self
            .staged
            .iter()
            .chain(&self.weights)
            .chain(&self.residual)
            .chain(rotary)
            .collect();
        let nr = usize::from(self.residual.is_some());
        let (rows, k) = (self.rows, self.k);
        let storages = dispatch_all(
            op,
            &operands,
            |_| {
                Err(Error::UnsupportedDevice {
                    op,
                    device: Device::Cpu,
                })
            },
            |views| {
                let at = |i: usize| -> At { at(views[i]) };
                let prologue = match kind {
                    Kind::Norm(eps) => Prologue::RmsNorm {
                        x: at(0),
                        weight: at(1),
                        eps,
                    },
                    Kind::Swiglu => Prologue::Swiglu {
                        gate: at(0),
                        up: at(1),
                    },
                    Kind::Plain => Prologue::Plain { x: at(0) },
                };
                let list: Vec<(At, usize)> =
                    (0..nw).map(|i| (at(ns + i), self.widths[i])).collect();
                let weights = match self.blocks {
                    Some(format) => Weights::Blocks(&list, format),
                    None => Weights::Dense(&list),
                };
                let epilogue = match (&self.residual, &finish) {
                    (Some(_), _) => Epilogue::Residual(at(ns + nw)),
                    (None, Finish::Store) => Epilogue::Products,
                    (None, Finish::Gated) => Epilogue::Swiglu,
                    (None, Finish::Rotary { cache, head_dim }) => {
                        let (mut kc, mut vc) = (
                            cache.k_cache.storage_cell().write(),
                            cache.v_cache.storage_cell().write(),
                        );
                        let (Storage::Cuda(kc), Storage::Cuda(vc)) = (&mut *kc, &mut *vc) else {
                            unreachable!("devices were checked equal")
                        };
                        let table = ns + nw + nr;
                        let rotary = RotaryWrite {
                            cos: at(table),
                            sin: at(table + 1),
                            table_stride: cache.cos.layout().strides()[0],
                            head_dim: *head_dim,
                            cache: CacheSlot {
                                k: kc,
                                v: vc,
                                capacity: cache.k_cache.shape()[2],
                                cursor: at(table + 2),
                            },
                        };
                        return cuda::decode_gemv(
                            &prologue,
                            rows,
                            k,
                            weights,
                            Epilogue::Rotary(rotary),
                            out_dtype,
                        );
                    }
                };
                cuda::decode_gemv(&prologue, rows, k, weights, epilogue, out_dtype)
            },
        )?;
        let shapes = match finish {
            Finish::Rotary { head_dim, .. } => {
                let [b, _, n] = self.shapes[0][..] else {
                    unreachable!("`takes` checked q's shape")
                };
                vec![vec![b, n / head_dim, 1, head_dim]]
            }
            _ => self.shapes,
        };
        storages
            .into_iter()
            .zip(&shapes)
            .map(|(s, shape)| Tensor::from_storage(Storage::Cuda(s), shape))
            .collect()
    }
}

/// A contiguous operand as the kernel takes it: its storage and first element.
fn at<'a>((s, l): CudaOperand<'a>) -> At<'a> {
    (s, l.offset())
}

#[cfg(test)]
#[path = "fused_linear_tests.rs"]
mod tests;
