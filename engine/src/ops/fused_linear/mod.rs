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

use super::index::cat_rows_as;
use super::matmul::product_in;
use super::product_weight::{all_dense, ProductWeight};
use super::{backward_fn, grad_if};
use crate::amp;
use crate::autograd::{no_grad, SavedTensor};
use crate::backend::cuda::decode_gemv as cuda;
use crate::{Error, Result, Tensor};
use plan::{plan, Finish, Kind};
use policy::{pair_rows_limit, qkv_cache_plan};

pub use policy::{
    fused_max_rows, product_dtype, qkv_into_cache_runs_kernel, runs_fused_kernel,
    set_block_products, trains, with_fixed_weights,
};

const NORM_OP: &str = "rms_norm_linears";
const NORM_SWIGLU_OP: &str = "rms_norm_swiglu";
const SWIGLU_OP: &str = "swiglu_linear";
const LINEAR_OP: &str = "linear_residual";
const LINEARS_OP: &str = "linears";
const QKV_CACHE_OP: &str = "rms_norm_qkv_into_cache";

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

mod plan;
mod policy;
#[cfg(test)]
mod tests;
