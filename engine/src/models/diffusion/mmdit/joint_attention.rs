//! diffusers' `Attention` with `JointAttnProcessor2_0`: the image tokens' q, k, v (`to_q`, …)
//! and the text tokens' (`add_q_proj`, …), each optionally RMS-normed per head (SD3.5's
//! `qk_norm: rms_norm`), attended as one sequence (image first), then split back, each
//! through its own output projection (`to_out.0`, `to_add_out`; the last block's text side
//! has none: `context_pre_only`). Without the text projections it is a plain self-attention
//! (SD3.5's second attention).

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

pub struct JointAttention {
    heads: usize,
    image: StreamProjections,
    to_out: Linear,
    /// The text stream's projections, and its output projection unless the block is the last.
    text: Option<(StreamProjections, Option<Linear>)>,
    training: bool,
}

impl JointAttention {
    /// `joint`: with the text stream; `text_out`: the text stream's output projection
    /// (`to_add_out`, absent in the last block).
    pub fn new(
        dim: usize,
        heads: usize,
        qk_norm: bool,
        joint: bool,
        text_out: bool,
        gen: &mut Generator,
    ) -> Result<JointAttention> {
        let head_dim = dim / heads;
        let text = match joint {
            true => Some((
                StreamProjections::new(dim, head_dim, qk_norm, gen)?,
                text_out
                    .then(|| Linear::new(dim, dim, true, gen))
                    .transpose()?,
            )),
            false => None,
        };
        Ok(JointAttention {
            heads,
            image: StreamProjections::new(dim, head_dim, qk_norm, gen)?,
            to_out: Linear::new(dim, dim, true, gen)?,
            text,
            training: true,
        })
    }

    /// The image tokens' output [B, N, dim], and the text tokens' [B, S, dim] where the
    /// attention has a text stream with an output projection.
    pub fn attend(&self, x: &Tensor, context: Option<&Tensor>) -> Result<(Tensor, Option<Tensor>)> {
        let n = x.shape()[1];
        let [mut q, mut k, mut v] = self.image.qkv(x, self.heads)?;
        let text = match (&self.text, context) {
            (Some((proj, out)), Some(c)) => {
                let [cq, ck, cv] = proj.qkv(c, self.heads)?;
                q = Tensor::cat(&[q, cq], 1)?;
                k = Tensor::cat(&[k, ck], 1)?;
                v = Tensor::cat(&[v, cv], 1)?;
                Some(out)
            }
            _ => None,
        };
        let heads_first = |t: Tensor| t.permute(&[0, 2, 1, 3]);
        let out = heads_first(q)?.scaled_dot_product_attention(
            &heads_first(k)?,
            &heads_first(v)?,
            AttentionOptions::default(),
        )?;
        let &[b, h, t, d] = out.shape() else {
            unreachable!("attention keeps the rank");
        };
        let out = out.permute(&[0, 2, 1, 3])?.reshape_to(&[b, t, h * d])?;
        let image = self.to_out.forward(&out.narrow(1, 0, n)?)?;
        let text = match text {
            Some(Some(proj)) => Some(proj.forward(&out.narrow(1, n, t - n)?)?),
            _ => None,
        };
        Ok((image, text))
    }
}

impl Module for JointAttention {
    /// Self-attention over the image tokens alone.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.attend(x, None)?.0)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c = self
            .image
            .children(["to_q", "to_k", "to_v", "norm_q", "norm_k"]);
        c.push(("to_out.0".into(), &self.to_out));
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
        c.push(&mut self.to_out);
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
