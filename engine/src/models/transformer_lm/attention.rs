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
    /// Keys further back than this many positions are hidden (Mistral, Gemma 2's local layers).
    window: Option<usize>,
    /// The scores' scale when it is not 1 / sqrt(head_dim) (Gemma 2).
    scale: Option<f64>,
    /// Scores pass through cap * tanh(score / cap) before the mask (Gemma 2); no fused kernel
    /// takes that, so these layers run the product, cap, mask and softmax as ops.
    softcap: Option<f64>,
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

/// What the new queries see in the layers that attend every key and in those with a sliding
/// window.
#[derive(Clone, Copy)]
pub struct Sight<'a> {
    pub full: Visibility<'a>,
    pub windowed: Visibility<'a>,
}

/// Where a layer's forward call sits: the new tokens' rotary angles, what they see, and where
/// their keys and values go in the cache.
#[derive(Clone, Copy)]
pub struct Step<'a> {
    pub angles: Angles<'a>,
    pub visibility: Visibility<'a>,
    pub cache: Option<CacheWrite<'a>>,
    /// Where sparse layers record their routing (for the load-balancing loss).
    pub routing: Option<&'a std::cell::RefCell<Vec<crate::nn::Routing>>>,
}

impl Attention {
    /// Layer `layer`'s attention, its weights from `params` under `{prefix}.q_proj.weight`, ...
    pub fn build(
        c: &LmConfig,
        layer: usize,
        prefix: &str,
        params: &mut ParamSource,
    ) -> Result<Self> {
        let hd = c.head_dim();
        let (qkv_bias, o_bias) = (c.qkv_bias(), c.attention_bias);
        let (q_out, kv_out) = (c.n_heads * hd, c.n_kv_heads * hd);
        let mut proj =
            |name: &str, i, o, bias| params.linear_biased(&format!("{prefix}.{name}"), i, o, bias);
        let [q_proj, k_proj, v_proj] = match c.family.fused_projections() {
            true => params.fused_linears(
                &format!("{prefix}.qkv_proj"),
                c.d_model,
                [q_out, kv_out, kv_out],
            )?,
            false => [
                proj("q_proj", c.d_model, q_out, qkv_bias)?,
                proj("k_proj", c.d_model, kv_out, qkv_bias)?,
                proj("v_proj", c.d_model, kv_out, qkv_bias)?,
            ],
        };
        let o_proj = params.linear_biased(&format!("{prefix}.o_proj"), q_out, c.d_model, o_bias)?;
        // Per head [head_dim] (Qwen3), or over the whole projection (OLMoE).
        let mut head_norm = |name: &str, width: usize| {
            let width = if c.qk_norm_whole() { width } else { hd };
            c.qk_norm()
                .then(|| params.rms_norm_of(&format!("{prefix}.{name}"), width, c.norm_eps))
                .transpose()
        };
        Ok(Attention {
            q_norm: head_norm("q_norm", q_out)?,
            k_norm: head_norm("k_norm", kv_out)?,
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
            window: c.layer_window(layer),
            scale: c.attention_scale(),
            softcap: c.attn_logit_softcapping,
        })
    }

    pub fn is_causal(&self) -> bool {
        self.causal
    }

    /// The sliding window this layer attends through, if any.
    pub fn window(&self) -> Option<usize> {
        self.window
    }

    /// The scores' scale (1 / sqrt(head_dim) unless the config sets another) and soft cap.
    pub(super) fn score_transform(&self, head_dim: usize) -> (f64, Option<f64>) {
        let scale = self.scale.unwrap_or(1.0 / (head_dim as f64).sqrt());
        (scale, self.softcap)
    }

    /// Whether the scores are soft-capped, which only the unfused path computes: such a layer
    /// needs its mask as a bias (`Visibility::Bias`) wherever a fused kernel would mask.
    pub fn softcaps(&self) -> bool {
        self.softcap.is_some()
    }

    /// The stream after attention: x + o(attention(rope(q(n)), rope(k(n)), v(n))) of the
    /// stream x normed by `norm` (n), the new keys and values written into the step's cache;
    /// with `post`, the output is normed by it before it is added (Gemma 2).
    pub fn forward(
        &self,
        stream: Stream,
        norm: &RmsNorm,
        post: Option<&RmsNorm>,
        step: &Step,
    ) -> Result<Stream> {
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
        let post = post.map(RmsNorm::parts).transpose()?;
        let post = post.as_ref().map(|(s, e)| (s, *e));
        Stream::after(x, &out, self.o_proj.projection(), post)
    }

    /// Attention of the heads q [B, heads, T, hd], k and v [B, kv_heads, L, hd] (q and k
    /// rotated, the cache extended): [B, T, heads * hd].
    fn attention(&self, q: &Tensor, k: &Tensor, v: &Tensor, step: &Step) -> Result<Tensor> {
        let (b, t) = (q.shape()[0], q.shape()[2]);
        let Heads { q: h, dim: hd, .. } = self.heads;
        let out = match (step.visibility, self.softcap) {
            (Visibility::Window { first, last }, None) => {
                q.decode_attention(k, v, first, last, self.scale)?
            }
            (Visibility::All | Visibility::Causal, None) => {
                let opts = AttentionOptions {
                    causal: matches!(step.visibility, Visibility::Causal),
                    scale: self.scale,
                };
                q.scaled_dot_product_attention(k, v, opts)?
            }
            (Visibility::Bias(bias), _) => self.unfused(q, k, v, Some(bias))?,
            (Visibility::All, Some(_)) => self.unfused(q, k, v, None)?,
            (Visibility::Window { .. } | Visibility::Causal, Some(_)) => {
                return Err(crate::Error::invalid(
                    "attention",
                    "a soft-capped layer takes its mask as a bias; the model built none",
                ))
            }
        };
        out.transpose(1, 2)?.reshape_to(&[b, t, h * hd])
    }

    /// softmax(cap(q kᵀ · scale) + bias) v as separate ops (a padded batch's mask, soft-capped
    /// scores), the query heads of a key/value group stacked against their shared keys.
    fn unfused(&self, q: &Tensor, k: &Tensor, v: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let (b, t) = (q.shape()[0], q.shape()[2]);
        let Heads { q: h, kv, dim: hd } = self.heads;
        let scale = self.scale.unwrap_or(1.0 / (hd as f64).sqrt());
        let q = q
            .mul_scalar(scale)?
            .reshape_to(&[b, kv, (h / kv) * t, hd])?;
        let mut scores = q.matmul(&k.transpose(-1, -2)?)?;
        if let Some(cap) = self.softcap {
            scores = super::head::soft_cap(&scores, cap)?;
        }
        if let Some(bias) = bias {
            scores = scores.add(bias)?;
        }
        scores.softmax(-1)?.matmul(v)?.reshape_to(&[b, h, t, hd])
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
        if let Some(cap) = self.softcap {
            detail.push_str(&format!(", softcap={cap}"));
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
