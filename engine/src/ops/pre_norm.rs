//! The two halves of a pre-norm decoder layer as ops over its residual stream: the stream is
//! normed and projected (attention's q, k and v; the MLP's gate and up), and an output product
//! is added back. Which kernels run is decided here, from the weights, the grad mode and the
//! step, so a layer has one forward that reads like its paper:
//!
//! - training (weights that take a gradient, no cache): q, k and v are one product of the
//!   three weights side by side, whose heads are split and q and k rotated by one op
//!   (`linears_joined`, `rotary_qkv`); its backward writes the product's gradient as one buffer;
//! - a decode step (one token a row, the cache written at its device cursor): the norm, the
//!   products, the rotation and the cache write are one op (`rms_norm_qkv_into_cache`, one
//!   kernel on CUDA);
//! - elsewhere with plain weights: the norm and the products fused (`rms_norm_linears`,
//!   `rms_norm_swiglu`), or, while an output is pending, the add and the norm fused
//!   (`add_rms_norm_as`) and the products after;
//! - a projection no kernel takes (an adapter, a bias) runs as its module's own forward.
//!
//! The stream carries the last half's output while it is not yet added: the next norm adds it
//! (one kernel reads the stream once for both, forward and backward, where a separate add
//! would take a pass of its own each way). In a decode step the fused output product adds the
//! stream in its epilogue instead, so nothing is left pending.

use super::fused_linear::{runs_fused_kernel, trains, RotaryCache};
use super::product_weight::ProductWeight;
use crate::amp::products_dtype;
use crate::autograd::no_grad;
use crate::{DType, Result, Tensor};

/// A layer's projection as these ops take it: the plain weight the fused kernels read, when
/// it has one, and the module that computes it otherwise.
#[derive(Clone, Copy)]
pub struct Projection<'a> {
    /// `None` when the product is more than x Wᵀ (an adapter, a bias).
    pub weight: Option<ProductWeight<'a>>,
    pub module: &'a dyn Project,
}

/// What computes a projection that the fused kernels do not take (`nn::Linear`'s forward).
pub trait Project {
    fn project(&self, x: &Tensor) -> Result<Tensor>;
}

impl Projection<'_> {
    fn dense(&self) -> Option<&Tensor> {
        self.weight.and_then(|w| w.dense())
    }
}

/// What a gated MLP's gate goes through: SiLU (SwiGLU, fused with the norm and both products
/// where the kernels take it) or another function of the gate (GeGLU's GELU), run after the
/// products.
pub enum Gate<'a> {
    Silu,
    Other(&'a dyn Fn(&Tensor) -> Result<Tensor>),
}

/// Attention's head counts and width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    pub q: usize,
    pub kv: usize,
    pub dim: usize,
}

/// The rotary angles of the new tokens: cos and sin (F32), broadcastable against the heads
/// [batch, heads, seq, head_dim].
#[derive(Clone, Copy)]
pub struct Angles<'a> {
    pub cos: &'a Tensor,
    pub sin: &'a Tensor,
}

/// Where the new keys and values go, in one layer's cache buffers [batch, kv_heads, capacity,
/// head_dim].
#[derive(Clone, Copy)]
pub enum CacheWrite<'a> {
    /// After the `at` positions cached so far; attention then reads positions 0..at + seq.
    Append {
        k: &'a Tensor,
        v: &'a Tensor,
        at: usize,
    },
    /// One decode step at the I64 device cursor [1]; attention reads the whole buffers and
    /// the caller's window says which positions count.
    AtCursor {
        k: &'a Tensor,
        v: &'a Tensor,
        cursor: &'a Tensor,
    },
}

/// The residual stream between the halves of the decoder layers: its sum so far, and the last
/// half's output while it is not yet added in.
pub struct Stream {
    sum: Tensor,
    pending: Option<Tensor>,
}

impl Stream {
    /// A stream that starts at `x` (the embeddings).
    pub fn new(x: Tensor) -> Self {
        Stream {
            sum: x,
            pending: None,
        }
    }

    /// The stream with its pending output added.
    pub fn into_tensor(self) -> Result<Tensor> {
        match self.pending {
            Some(output) => self.sum.add(&output),
            None => Ok(self.sum),
        }
    }

    /// The stream `x` after a half whose output product reads `input`: x + input Wᵀ, added in
    /// the product's epilogue where the fused decode kernel runs it, else left pending. With
    /// `post` (a norm's scale [d] and eps), the output is normed before it is added (Gemma 2).
    pub fn after(
        x: Tensor,
        input: &Tensor,
        out: Projection,
        post: Option<(&Tensor, f64)>,
    ) -> Result<Stream> {
        let output = match out.weight {
            Some(w) if post.is_none() && runs_fused_kernel(input, w)? => {
                return Ok(Stream::new(input.linear_residual(w, Some(&x))?));
            }
            Some(w) => input.linear_residual(w, None)?,
            None => out.module.project(input)?,
        };
        let output = match post {
            // In the stream's dtype first: under mixed precision the product is BF16 and the
            // norm's weight F32 (transformers norms in F32 too).
            Some((scale, eps)) => {
                output
                    .to_dtype(x.dtype())?
                    .rms_norm_as(Some(scale), eps, x.dtype())?
            }
            None => output,
        };
        Ok(Stream {
            sum: x,
            pending: Some(output),
        })
    }

    /// Attention's inputs: the stream (its pending output added) and q, k and v of the stream
    /// normed by `norm` [d] with `eps`, as heads [batch, heads, seq, head_dim]; q and k rotated
    /// by `angles`; with a cache, k and v written into it and returned as everything the
    /// attention reads of it. `head_norms` (weight and eps for q and for k) RMS-norm each query
    /// and key head before the rotation (weights [head_dim], Qwen3) or the whole projections
    /// (weights as wide as q and k, OLMoE); the fused kernels take none.
    pub fn attention_inputs(
        self,
        (norm, eps): (&Tensor, f64),
        [pq, pk, pv]: [Projection; 3],
        heads: Heads,
        head_norms: Option<[(&Tensor, f64); 2]>,
        angles: Angles,
        cache: Option<CacheWrite>,
    ) -> Result<(Tensor, [Tensor; 3])> {
        let dense = [pq.dense(), pk.dense(), pv.dense()];
        if let ([Some(wq), Some(wk), Some(wv)], None) = (dense, head_norms) {
            if cache.is_none() && trains(&[wq, wk, wv]) {
                let (x, normed) = self.normed_for_products(norm, eps)?;
                let joined = normed.linears_joined(&[wq, wk, wv])?;
                let sizes = [wq, wk, wv].map(|w| w.shape()[0]);
                let qkv = joined.rotary_qkv(sizes, heads.dim, angles.cos, angles.sin)?;
                return Ok((x, qkv));
            }
            if let (Some(CacheWrite::AtCursor { k, v, cursor }), None) = (cache, &self.pending) {
                let target = RotaryCache {
                    cos: angles.cos,
                    sin: angles.sin,
                    k_cache: k,
                    v_cache: v,
                    cursor,
                };
                let x = self.sum;
                let q = x.rms_norm_qkv_into_cache(norm, eps, [wq, wk, wv], heads.dim, target)?;
                return Ok((x, [q, k.clone(), v.clone()]));
            }
        }
        let (x, [mut q, mut k, v]) = self.normed_products(norm, eps, [pq, pk, pv])?;
        // Norms as wide as a head norm each head (Qwen3); wider ones the whole projection,
        // before the heads are split (OLMoE).
        let per_head = head_norms.is_some_and(|[(wq, _), _]| wq.numel() == heads.dim);
        if let (Some([(wq, eq), (wk, ek)]), false) = (head_norms, per_head) {
            q = q.rms_norm(Some(wq), eq)?;
            k = k.rms_norm(Some(wk), ek)?;
        }
        let split = |t: &Tensor, n: usize| t.unflatten(-1, &[n, heads.dim])?.transpose(1, 2);
        let (mut q, mut k) = (split(&q, heads.q)?, split(&k, heads.kv)?);
        if let (Some([(wq, eq), (wk, ek)]), true) = (head_norms, per_head) {
            q = q.rms_norm(Some(wq), eq)?;
            k = k.rms_norm(Some(wk), ek)?;
        }
        let v = split(&v, heads.kv)?.to_dtype(k.dtype())?;
        let qkv = match cache {
            Some(CacheWrite::AtCursor {
                k: k_cache,
                v: v_cache,
                cursor,
            }) => {
                let (cos, sin) = (angles.cos, angles.sin);
                let q =
                    super::rope::rotary_into_cache(&q, &k, &v, cos, sin, k_cache, v_cache, cursor)?;
                [q, k_cache.clone(), v_cache.clone()]
            }
            Some(CacheWrite::Append {
                k: k_cache,
                v: v_cache,
                at,
            }) => {
                let q = q.rotary_embedding(angles.cos, angles.sin)?;
                let k = k.rotary_embedding(angles.cos, angles.sin)?;
                let seq = k.shape()[2];
                no_grad(|| -> Result<()> {
                    k_cache.narrow(2, at, seq)?.copy_(&k)?;
                    v_cache.narrow(2, at, seq)?.copy_(&v)
                })?;
                [
                    q,
                    k_cache.narrow(2, 0, at + seq)?,
                    v_cache.narrow(2, 0, at + seq)?,
                ]
            }
            None => [
                q.rotary_embedding(angles.cos, angles.sin)?,
                k.rotary_embedding(angles.cos, angles.sin)?,
                v,
            ],
        };
        Ok((x, qkv))
    }

    /// The gated MLP's input: the stream (its pending output added) and act(gate(n)) * up(n)
    /// of the stream n normed by `norm` with `eps`.
    pub fn gated(
        self,
        (norm, eps): (&Tensor, f64),
        gate: Projection,
        up: Projection,
        activation: Gate,
    ) -> Result<(Tensor, Tensor)> {
        match (gate.weight, up.weight, &activation) {
            (Some(g), Some(u), Gate::Silu) if self.pending.is_none() => {
                let x = self.sum;
                let gated = x.rms_norm_swiglu(norm, eps, g, u)?;
                Ok((x, gated))
            }
            _ => {
                let (x, [g, u]) = self.normed_products(norm, eps, [gate, up])?;
                let gated = match activation {
                    Gate::Silu => g.swiglu(&u)?,
                    Gate::Other(act) => act(&g)?.mul(&u)?,
                };
                Ok((x, gated))
            }
        }
    }

    /// A half whose output the caller computes from the normed stream (a mixture of experts):
    /// the stream (its pending output added) and the stream normed by `norm` with `eps`, in
    /// the products' dtype.
    pub fn normed(self, (norm, eps): (&Tensor, f64)) -> Result<(Tensor, Tensor)> {
        self.normed_for_products(norm, eps)
    }

    /// The stream `x` with `output` pending, to be added by the next norm.
    pub fn with_output(x: Tensor, output: Tensor) -> Stream {
        Stream {
            sum: x,
            pending: Some(output),
        }
    }

    /// The last layer's stream, its pending output added, normed by the final `norm`: for the
    /// head's products (their dtype under mixed precision) or in the stream's own dtype.
    pub fn finish(self, (norm, eps): (&Tensor, f64), for_products: bool) -> Result<Tensor> {
        let dtype = match for_products {
            true => products_dtype(&self.sum),
            false => self.sum.dtype(),
        };
        Ok(self.add_and_norm(norm, eps, dtype)?.1)
    }

    /// The stream and the products of it normed: fused with the norm when nothing is pending
    /// and every weight is plain, else after the norm (which adds what is pending).
    fn normed_products<const N: usize>(
        self,
        norm: &Tensor,
        eps: f64,
        projections: [Projection; N],
    ) -> Result<(Tensor, [Tensor; N])> {
        let weights: Option<Vec<ProductWeight>> = projections.iter().map(|p| p.weight).collect();
        let (x, products) = match weights {
            Some(ws) if self.pending.is_none() => {
                let x = self.sum;
                let out = x.rms_norm_linears(norm, eps, &ws)?;
                (x, out)
            }
            _ => {
                let (x, normed) = self.normed_for_products(norm, eps)?;
                let dense: Option<Vec<&Tensor>> = projections.iter().map(|p| p.dense()).collect();
                let out = match dense {
                    Some(ws) => normed.linears(&ws)?,
                    None => projections
                        .iter()
                        .map(|p| p.module.project(&normed))
                        .collect::<Result<_>>()?,
                };
                (x, out)
            }
        };
        let products = <[Tensor; N]>::try_from(products)
            .unwrap_or_else(|_| unreachable!("N weights give N products"));
        Ok((x, products))
    }

    /// The stream with its pending output added, and normed for the products that read it
    /// (cast for them under mixed precision).
    fn normed_for_products(self, norm: &Tensor, eps: f64) -> Result<(Tensor, Tensor)> {
        let dtype = products_dtype(&self.sum);
        self.add_and_norm(norm, eps, dtype)
    }

    fn add_and_norm(self, norm: &Tensor, eps: f64, dtype: DType) -> Result<(Tensor, Tensor)> {
        match &self.pending {
            Some(a) => self.sum.add_rms_norm_as(a, norm, eps, dtype),
            None => {
                let normed = self.sum.rms_norm_as(Some(norm), eps, dtype)?;
                Ok((self.sum, normed))
            }
        }
    }
}
