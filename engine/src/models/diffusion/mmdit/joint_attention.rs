//! diffusers' `Attention` with `JointAttnProcessor2_0` (SD3) and `FluxAttention`: the image
//! tokens' q, k, v (`to_q`, …) and the text tokens' (`add_q_proj`, …), each optionally
//! RMS-normed per head (SD3.5's `qk_norm: rms_norm`, always in FLUX), attended as one
//! sequence (SD3: image first; FLUX: text first, with rotary positions), then split back,
//! each through its own output projection (`to_out.0`, `to_add_out`; the last SD3 block's
//! text side has none: `context_pre_only`). Without the text projections it is a plain
//! self-attention (SD3.5's second attention; FLUX's single blocks, which have no output
//! projection either).

use crate::nn::{Linear, Module, RmsNorm};
use crate::ops::attention::AttentionOptions;
use crate::{Generator, Result, Tensor};

/// One stream's q, k, v projections and their per-head norms.
struct StreamProjections {
    q: Linear,
    k: Linear,
    v: Linear,
    norm_q: Option<RmsNorm>,
    norm_k: Option<RmsNorm>,
}

impl StreamProjections {
    fn new(dim: usize, head_dim: usize, qk_norm: bool, gen: &mut Generator) -> Result<Self> {
        let norm = || qk_norm.then(|| RmsNorm::new(head_dim, 1e-6)).transpose();
        Ok(StreamProjections {
            q: Linear::new(dim, dim, true, gen)?,
            k: Linear::new(dim, dim, true, gen)?,
            v: Linear::new(dim, dim, true, gen)?,
            norm_q: norm()?,
            norm_k: norm()?,
        })
    }

    /// q, k, v of tokens [B, T, dim], each [B, T, heads, head_dim].
    fn qkv(&self, x: &Tensor, heads: usize) -> Result<[Tensor; 3]> {
        let &[b, t, dim] = x.shape() else {
            unreachable!("the model checks its tokens");
        };
        let split = |y: Tensor| y.reshape_to(&[b, t, heads, dim / heads]);
        let normed = |y: Tensor, norm: &Option<RmsNorm>| match norm {
            Some(n) => n.forward(&y),
            None => Ok(y),
        };
        Ok([
            normed(split(self.q.forward(x)?)?, &self.norm_q)?,
            normed(split(self.k.forward(x)?)?, &self.norm_k)?,
            split(self.v.forward(x)?)?,
        ])
    }

    /// (name, module) of each part, under `names`: [q, k, v, norm_q, norm_k].
    fn children<'a>(&'a self, names: [&str; 5]) -> Vec<(String, &'a dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            (names[0].into(), &self.q),
            (names[1].into(), &self.k),
            (names[2].into(), &self.v),
        ];
        if let (Some(nq), Some(nk)) = (&self.norm_q, &self.norm_k) {
            c.push((names[3].into(), nq));
            c.push((names[4].into(), nk));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.q, &mut self.k, &mut self.v];
        if let (Some(nq), Some(nk)) = (&mut self.norm_q, &mut self.norm_k) {
            c.push(nq);
            c.push(nk);
        }
        c
    }
}

/// Which parts an attention has.
#[derive(Clone, Copy, Debug)]
pub struct AttentionParts {
    /// Per-head RMS norms of q and k.
    pub qk_norm: bool,
    /// The text stream's projections, and whether it has an output projection (`to_add_out`).
    pub text: Option<bool>,
    /// The image side's output projection (`to_out.0`).
    pub image_out: bool,
    /// The text tokens go before the image tokens (FLUX).
    pub text_first: bool,
}

/// Rotary position angles for every token of the sequence attended, text then image. FLUX
/// rotates each pair of neighbouring channels (2i, 2i + 1) together (`apply_rotary_emb` with
/// `use_real_unbind_dim=-1`); here q and k are laid out with their channels de-interleaved
/// (evens, then odds) as they go head-major for attention, which turns each pair into
/// (i, i + D/2): the half-split rotation of `Tensor::rotary_embedding`, one fused kernel on
/// CUDA. Attention reads q·k, which the same reordering of both leaves unchanged.
pub struct Rotary {
    /// cos and sin [S, head_dim] (F32) of pair i at channels i and i + D/2.
    pub cos: Tensor,
    pub sin: Tensor,
}

impl Rotary {
    /// x [B, S, heads, D] rotated and head-major: [B, heads, S, D] with its channels
    /// de-interleaved.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let &[b, s, h, d] = x.shape() else {
            unreachable!("q and k are [B, S, heads, D]");
        };
        x.reshape_to(&[b, s, h, d / 2, 2])?
            .permute(&[0, 2, 1, 4, 3])?
            .contiguous()?
            .reshape_to(&[b, h, s, d])?
            .rotary_embedding(&self.cos, &self.sin)
    }
}

pub struct JointAttention {
    heads: usize,
    image: StreamProjections,
    to_out: Option<Linear>,
    /// The text stream's projections, and its output projection unless the block is SD3's
    /// last.
    text: Option<(StreamProjections, Option<Linear>)>,
    text_first: bool,
    training: bool,
}

impl JointAttention {
    pub fn new(
        dim: usize,
        heads: usize,
        parts: AttentionParts,
        gen: &mut Generator,
    ) -> Result<JointAttention> {
        let head_dim = dim / heads;
        let linear = |on: bool, gen: &mut Generator| {
            on.then(|| Linear::new(dim, dim, true, gen)).transpose()
        };
        let text = match parts.text {
            Some(out) => Some((
                StreamProjections::new(dim, head_dim, parts.qk_norm, gen)?,
                linear(out, gen)?,
            )),
            None => None,
        };
        Ok(JointAttention {
            heads,
            image: StreamProjections::new(dim, head_dim, parts.qk_norm, gen)?,
            to_out: linear(parts.image_out, gen)?,
            text,
            text_first: parts.text_first,
            training: true,
        })
    }

    /// The image tokens' output [B, N, dim], and the text tokens' [B, S, dim] where the
    /// attention has a text stream with an output projection; positions rotated by `rotary`
    /// where given (FLUX).
    pub fn attend(
        &self,
        x: &Tensor,
        context: Option<&Tensor>,
        rotary: Option<&Rotary>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let [mut q, mut k, mut v] = self.image.qkv(x, self.heads)?;
        let n = x.shape()[1];
        // Where the image tokens start in the sequence.
        let mut image_at = 0;
        let text = match (&self.text, context) {
            (Some((proj, out)), Some(c)) => {
                let [cq, ck, cv] = proj.qkv(c, self.heads)?;
                let join = |a: Tensor, t: Tensor| match self.text_first {
                    true => Tensor::cat(&[t, a], 1),
                    false => Tensor::cat(&[a, t], 1),
                };
                q = join(q, cq)?;
                k = join(k, ck)?;
                v = join(v, cv)?;
                if self.text_first {
                    image_at = c.shape()[1];
                }
                Some(out)
            }
            _ => None,
        };
        let heads_first = |t: &Tensor| t.permute(&[0, 2, 1, 3]);
        let (q, k) = match rotary {
            Some(r) => (r.apply(&q)?, r.apply(&k)?),
            None => (heads_first(&q)?, heads_first(&k)?),
        };
        let out =
            q.scaled_dot_product_attention(&k, &heads_first(&v)?, AttentionOptions::default())?;
        let &[b, h, t, d] = out.shape() else {
            unreachable!("attention keeps the rank");
        };
        let out = out.permute(&[0, 2, 1, 3])?.reshape_to(&[b, t, h * d])?;
        let text_at = if self.text_first { 0 } else { n };
        let image = out.narrow(1, image_at, n)?;
        let image = match &self.to_out {
            Some(proj) => proj.forward(&image)?,
            None => image,
        };
        let text = match text {
            Some(Some(proj)) => Some(proj.forward(&out.narrow(1, text_at, t - n)?)?),
            _ => None,
        };
        Ok((image, text))
    }
}

impl Module for JointAttention {
    /// Self-attention over the image tokens alone.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.attend(x, None, None)?.0)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c = self
            .image
            .children(["to_q", "to_k", "to_v", "norm_q", "norm_k"]);
        if let Some(o) = &self.to_out {
            c.push(("to_out.0".into(), o));
        }
        if let Some((proj, out)) = &self.text {
            c.extend(proj.children([
                "add_q_proj",
                "add_k_proj",
                "add_v_proj",
                "norm_added_q",
                "norm_added_k",
            ]));
            if let Some(o) = out {
                c.push(("to_add_out".into(), o));
            }
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c = self.image.children_mut();
        if let Some(o) = &mut self.to_out {
            c.push(o);
        }
        if let Some((proj, out)) = &mut self.text {
            c.extend(proj.children_mut());
            if let Some(o) = out {
                c.push(o);
            }
        }
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        match self.text {
            Some(_) => "JointAttention".into(),
            None => "Attention".into(),
        }
    }
}
