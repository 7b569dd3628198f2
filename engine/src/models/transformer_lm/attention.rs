//! Grouped-query self-attention (LLaMA's `self_attn`): q, k and v of the normed stream, q and
//! k rotated, the cache extended (`ops::pre_norm` chooses the kernels for that), the heads'
//! attention, and the output product added back. Unpadded batches go through
//! `Tensor::scaled_dot_product_attention` (fused on CUDA in BF16/F16); left-padded batches,
//! whose mask differs per row, run the unfused product, bias, softmax and product here.
//!
//! Grouping without copies: the query heads that share key/value head g are heads
//! g * group .. (g + 1) * group, so queries [B, H, T, hd] reshape (no copy) to
//! [B, KV, group * T, hd] and multiply the [B, KV, L, hd] keys directly, instead of repeating
//! every key and value `group` times as the reference implementation does.

use super::mask::MaskSpec;
use super::params::ParamSource;
use super::LmConfig;
use crate::nn::{prefixed, Linear, Module, RmsNorm, Summary};
use crate::ops::pre_norm::{Angles, CacheWrite, Heads, Stream};
use crate::{AttentionOptions, Result, Tensor};

pub struct Attention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    /// Qwen3's RMS norms of each query and key head, before the rotation.
    pub q_norm: Option<RmsNorm>,
    pub k_norm: Option<RmsNorm>,
    heads: Heads,
    causal: bool,
    /// Keys further back than this many positions are hidden (Mistral).
    window: Option<usize>,
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

/// Where a layer's forward call sits: the new tokens' rotary angles, what they see, and where
/// their keys and values go in the cache.
#[derive(Clone, Copy)]
pub struct Step<'a> {
    pub angles: Angles<'a>,
    pub visibility: Visibility<'a>,
    pub cache: Option<CacheWrite<'a>>,
}

impl Attention {
    /// Takes its weights from `params` under `{prefix}.q_proj.weight`, ...
    pub fn build(c: &LmConfig, prefix: &str, params: &mut ParamSource) -> Result<Self> {
        let hd = c.head_dim();
        let (qkv_bias, o_bias) = (c.qkv_bias(), c.attention_bias);
        let mut proj =
            |name: &str, i, o, bias| params.linear_biased(&format!("{prefix}.{name}"), i, o, bias);
        let q_proj = proj("q_proj", c.d_model, c.n_heads * hd, qkv_bias)?;
        let k_proj = proj("k_proj", c.d_model, c.n_kv_heads * hd, qkv_bias)?;
        let v_proj = proj("v_proj", c.d_model, c.n_kv_heads * hd, qkv_bias)?;
        let o_proj = proj("o_proj", c.n_heads * hd, c.d_model, o_bias)?;
        let mut head_norm = |name: &str| {
            c.qk_norm()
                .then(|| params.rms_norm_of(&format!("{prefix}.{name}"), hd, c.norm_eps))
                .transpose()
        };
        Ok(Attention {
            q_norm: head_norm("q_norm")?,
            k_norm: head_norm("k_norm")?,
            q_proj,
            k_proj,
            v_proj,
            o_proj,
            heads: Heads {
                q: c.n_heads,
                kv: c.n_kv_heads,
                dim: hd,
            },
            causal: !c.bidirectional,
            window: c.sliding_window,
        })
    }

    pub fn is_causal(&self) -> bool {
        self.causal
    }

    /// The stream after attention: x + o(attention(rope(q(n)), rope(k(n)), v(n))) of the
    /// stream x normed by `norm` (n), the new keys and values written into the step's cache.
    pub fn forward(&self, stream: Stream, norm: &RmsNorm, step: &Step) -> Result<Stream> {
        let qkv = [&self.q_proj, &self.k_proj, &self.v_proj].map(Linear::projection);
        let (scale, eps) = norm.parts()?;
        let head_norms = match (&self.q_norm, &self.k_norm) {
            (Some(q), Some(k)) => Some([q.parts()?, k.parts()?]),
            _ => None,
        };
        let (x, [q, k, v]) = stream.attention_inputs(
            (&scale, eps),
            qkv,
            self.heads,
            head_norms
                .as_ref()
                .map(|[(q, eq), (k, ek)]| [(q, *eq), (k, *ek)]),
            step.angles,
            step.cache,
        )?;
        let out = self.attention(&q, &k, &v, step)?;
        Stream::after(x, &out, self.o_proj.projection())
    }

    /// Attention of the heads q [B, heads, T, hd], k and v [B, kv_heads, L, hd] (q and k
    /// rotated, the cache extended): [B, T, heads * hd].
    fn attention(&self, q: &Tensor, k: &Tensor, v: &Tensor, step: &Step) -> Result<Tensor> {
        let (b, t) = (q.shape()[0], q.shape()[2]);
        let Heads { q: h, kv, dim: hd } = self.heads;
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
            group: self.heads.q / self.heads.kv,
            seq,
            keys: offset + seq,
            offset,
            causal: self.causal,
            pads: if pads.iter().any(|&p| p > 0) {
                pads.to_vec()
            } else {
                Vec::new()
            },
            window: self.window,
        }
    }

    /// The sliding window, when one hides keys of a call that ends `keys` positions in.
    pub fn window_hides(&self, keys: usize) -> Option<usize> {
        self.window.filter(|&w| keys > w)
    }

    /// The printed form: the heads, the four projections and any head norms.
    pub fn summary(&self) -> Summary {
        let mut detail = format!(
            "heads={}, kv_heads={}, head_dim={}, causal={}",
            self.heads.q, self.heads.kv, self.heads.dim, self.causal
        );
        if let Some(w) = self.window {
            detail.push_str(&format!(", sliding_window={w}"));
        }
        let norms = [("q_norm", &self.q_norm), ("k_norm", &self.k_norm)]
            .into_iter()
            .filter_map(|(n, norm)| Some((n.to_string(), norm.as_ref()?.summary())));
        let children = self
            .projections()
            .into_iter()
            .map(|(n, l)| (n.to_string(), l.summary()))
            .chain(norms)
            .collect();
        Summary::node("Attention", children).with_detail(detail)
    }

    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let norms = [("q_norm", &self.q_norm), ("k_norm", &self.k_norm)]
            .into_iter()
            .filter_map(|(n, norm)| Some(prefixed(n, norm.as_ref()?.named_parameters())));
        self.projections()
            .into_iter()
            .map(|(n, l)| prefixed(n, l.named_parameters()))
            .chain(norms)
            .flatten()
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
