//! Grouped-query self-attention (LLaMA's `self_attn`). Unpadded batches go through
//! `Tensor::scaled_dot_product_attention` (fused on CUDA in BF16/F16); left-padded batches,
//! whose mask differs per row, run the unfused product, bias, softmax and product here.
//!
//! Grouping without copies: the query heads that share key/value head g are heads
//! g * group .. (g + 1) * group, so queries [B, H, T, hd] reshape (no copy) to
//! [B, KV, group * T, hd] and multiply the [B, KV, L, hd] keys directly, instead of repeating
//! every key and value `group` times as the reference implementation does.

use super::kv_cache::KvCache;
use super::mask::MaskSpec;
use super::params::ParamSource;
use super::residual::Residual;
use super::rope::{Positions, Rotary};
use super::LmConfig;
use crate::nn::{prefixed, Linear, Module, RmsNorm, Summary};
use crate::ops::fused_linear::trains;
use crate::{AttentionOptions, Result, Tensor};

pub struct Attention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    causal: bool,
}

/// Which keys the new queries see.
#[derive(Clone, Copy)]
pub enum Visibility<'a> {
    /// Every key (a bidirectional model, or one causal step after the cache).
    All,
    /// Keys up to each query's own position.
    Causal,
    /// Added to the scores: 0 where a key is visible, -inf where it is hidden (padded batches;
    /// see `MaskSpec`).
    Bias(&'a Tensor),
    /// One decode step against the whole cache: row b sees keys first[b] ..= last, bounds in
    /// device memory (I64 [batch] and [1]). The step's keys and values go in at the cache's
    /// cursor.
    Window { first: &'a Tensor, last: &'a Tensor },
}

/// Where a forward call sits: positions of the new tokens, what they see, and the cache to
/// extend.
pub struct Step<'a> {
    pub positions: Positions<'a>,
    pub visibility: Visibility<'a>,
    pub cache: Option<(&'a KvCache, usize)>,
}

impl Attention {
    /// Takes its weights from `params` under `{prefix}.q_proj.weight`, ...
    pub fn build(c: &LmConfig, prefix: &str, params: &mut ParamSource) -> Result<Self> {
        let hd = c.head_dim();
        let mut proj = |name: &str, i, o| params.linear(&format!("{prefix}.{name}"), i, o);
        Ok(Attention {
            q_proj: proj("q_proj", c.d_model, c.n_heads * hd)?,
            k_proj: proj("k_proj", c.d_model, c.n_kv_heads * hd)?,
            v_proj: proj("v_proj", c.d_model, c.n_kv_heads * hd)?,
            o_proj: proj("o_proj", c.n_heads * hd, c.d_model)?,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: hd,
            causal: !c.bidirectional,
        })
    }

    pub fn is_causal(&self) -> bool {
        self.causal
    }

    /// [B, T, heads * hd] -> [B, heads, T, hd], a view.
    fn heads(&self, x: &Tensor, heads: usize) -> Result<Tensor> {
        x.unflatten(-1, &[heads, self.head_dim])?.transpose(1, 2)
    }

    /// The stream after attention: x + attention(norm(x)) for the stream x [B, T, d_model],
    /// the normed input cast once for the products. With plain dense weights and nothing
    /// pending, the norm and the q/k/v products are one fused op; a pending output is added
    /// by the norm (`Residual`), and the output product leaves its own pending or adds it.
    pub fn forward_residual(
        &self,
        stream: Residual,
        norm: &RmsNorm,
        rope: &Rotary,
        step: &Step,
    ) -> Result<Residual> {
        let weights = [&self.q_proj, &self.k_proj, &self.v_proj].map(Linear::product_weight);
        let qkv = weights.map(|w| w.and_then(|w| w.dense()));
        if let [Some(wq), Some(wk), Some(wv)] = qkv {
            if step.cache.is_none() && trains(&[wq, wk, wv]) {
                // Training: one product of the three weights side by side, whose heads are
                // split and q and k rotated by one op; its backward writes the product's
                // gradient as one buffer.
                let (x, normed) = stream.normed_for_products(norm)?;
                let joined = normed.linears_joined(&[wq, wk, wv])?;
                let (cos, sin) =
                    rope.angles_for(joined.shape()[1], joined.device(), &step.positions)?;
                let sizes = [wq, wk, wv].map(|w| w.shape()[0]);
                let [q, k, v] = joined.rotary_qkv(sizes, self.head_dim, &cos, &sin)?;
                let out = self.attention(&q, &k, &v, step)?;
                return Residual::after(x, &out, &self.o_proj);
            }
        }
        if let (
            [Some(wq), Some(wk), Some(wv)],
            Some((cache, layer)),
            Visibility::Window { .. },
            Positions::Angles { cos, sin },
        ) = (qkv, step.cache, step.visibility, step.positions)
        {
            if !stream.is_pending() {
                // A decode step: the norm, the products, the rotation and the cache write in
                // one op (one kernel on CUDA).
                let x = stream.into_sum();
                let target = cache.rotary_target(layer, cos, sin);
                let q = x.rms_norm_qkv_into_cache(
                    &norm.weight,
                    norm.eps,
                    [wq, wk, wv],
                    self.head_dim,
                    target,
                )?;
                let out = self.attention(&q, target.k_cache, target.v_cache, step)?;
                return Residual::after(x, &out, &self.o_proj);
            }
        }
        let (x, products) = match weights {
            [Some(wq), Some(wk), Some(wv)] if !stream.is_pending() => {
                let x = stream.into_sum();
                let out = x.rms_norm_linears(&norm.weight, norm.eps, &[wq, wk, wv])?;
                (x, out)
            }
            _ => {
                let (x, normed) = stream.normed_for_products(norm)?;
                let out = match qkv {
                    [Some(wq), Some(wk), Some(wv)] => normed.linears(&[wq, wk, wv])?,
                    _ => vec![
                        self.q_proj.forward(&normed)?,
                        self.k_proj.forward(&normed)?,
                        self.v_proj.forward(&normed)?,
                    ],
                };
                (x, out)
            }
        };
        let [q, k, v] = <[Tensor; 3]>::try_from(products)
            .unwrap_or_else(|_| unreachable!("three weights give three products"));
        let out = self.attend(&q, &k, &v, rope, step)?;
        Residual::after(x, &out, &self.o_proj)
    }

    /// The heads' attention of the projections q, k, v [B, T, heads * hd] before the output
    /// product: [B, T, n_heads * hd].
    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        rope: &Rotary,
        step: &Step,
    ) -> Result<Tensor> {
        let (h, kv) = (self.n_heads, self.n_kv_heads);
        let q = self.heads(q, h)?;
        let k = self.heads(k, kv)?;
        let v = self.heads(v, kv)?.to_dtype(k.dtype())?;
        let (q, k, v) = match (step.cache, step.visibility, step.positions) {
            // A decode step: rotation and the cache write in one op, at the device cursor.
            (Some((cache, layer)), Visibility::Window { .. }, Positions::Angles { cos, sin }) => {
                let [q, k, v] = cache.rotate_and_write(layer, [&q, &k, &v], cos, sin)?;
                (q, k, v)
            }
            (cache, _, positions) => {
                let q = rope.apply(&q, &positions)?;
                let k = rope.apply(&k, &positions)?;
                match cache {
                    Some((cache, layer)) => {
                        let (k, v) = cache.append(layer, &k, &v)?;
                        (q, k, v)
                    }
                    None => (q, k, v),
                }
            }
        };
        self.attention(&q, &k, &v, step)
    }

    /// Attention of the heads q [B, heads, T, hd], k and v [B, kv_heads, L, hd] (q and k
    /// rotated, the cache extended): [B, T, heads * hd].
    fn attention(&self, q: &Tensor, k: &Tensor, v: &Tensor, step: &Step) -> Result<Tensor> {
        let (b, t) = (q.shape()[0], q.shape()[2]);
        let (h, kv, hd) = (self.n_heads, self.n_kv_heads, self.head_dim);
        let out = match step.visibility {
            Visibility::Window { first, last } => q.decode_attention(k, v, first, last, None)?,
            Visibility::All | Visibility::Causal => {
                let opts = AttentionOptions {
                    causal: matches!(step.visibility, Visibility::Causal),
                    scale: None,
                };
                q.scaled_dot_product_attention(k, v, opts)?
            }
            Visibility::Bias(bias) => {
                let q = q.mul_scalar(1.0 / (hd as f64).sqrt())?.reshape_to(&[
                    b,
                    kv,
                    (h / kv) * t,
                    hd,
                ])?;
                let scores = q.matmul(&k.transpose(-1, -2)?)?.add(bias)?;
                scores.softmax(-1)?.matmul(v)?.reshape_to(&[b, h, t, hd])?
            }
        };
        out.transpose(1, 2)?.reshape_to(&[b, t, h * hd])
    }

    /// The mask this call needs, if any.
    pub fn mask_spec(&self, seq: usize, offset: usize, pads: &[usize]) -> MaskSpec {
        MaskSpec {
            group: self.n_heads / self.n_kv_heads,
            seq,
            keys: offset + seq,
            offset,
            causal: self.causal,
            pads: if pads.iter().any(|&p| p > 0) {
                pads.to_vec()
            } else {
                Vec::new()
            },
        }
    }

    /// The printed form: the heads and the four projections.
    pub fn summary(&self) -> Summary {
        let detail = format!(
            "heads={}, kv_heads={}, head_dim={}, causal={}",
            self.n_heads, self.n_kv_heads, self.head_dim, self.causal
        );
        let children = self
            .projections()
            .into_iter()
            .map(|(n, l)| (n.to_string(), l.summary()))
            .collect();
        Summary::node("Attention", children).with_detail(detail)
    }

    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.projections()
            .into_iter()
            .flat_map(|(n, l)| prefixed(n, l.named_parameters()))
            .collect()
    }

    /// The four projections under their Hugging Face names.
    pub fn projections(&self) -> [(&'static str, &Linear); 4] {
        [
            ("q_proj", &self.q_proj),
            ("k_proj", &self.k_proj),
            ("v_proj", &self.v_proj),
            ("o_proj", &self.o_proj),
        ]
    }

    pub fn projections_mut(&mut self) -> [(&'static str, &mut Linear); 4] {
        [
            ("q_proj", &mut self.q_proj),
            ("k_proj", &mut self.k_proj),
            ("v_proj", &mut self.v_proj),
            ("o_proj", &mut self.o_proj),
        ]
    }
}
