//! diffusers' `Transformer2DModel` as Stable Diffusion's UNets use it: the feature map as
//! tokens (GroupNorm, a 1x1 conv or a linear in), `BasicTransformerBlock`s (LayerNorm →
//! self-attention, LayerNorm → cross-attention over the text states, LayerNorm → GEGLU
//! feed-forward, each added back), the projection out, and the input added back.

use super::blocks::{conv, multi_head};
use super::feed_forward::{FeedForward, FeedForwardActivation};
use crate::nn::{Conv2d, GroupNorm, LayerNorm, Linear, Module};
use crate::{Error, Generator, Result, Tensor};

/// diffusers' `Attention` without a norm: q from the tokens, k and v from the context (the
/// tokens themselves for self-attention), no biases on q/k/v, a biased output projection.
pub struct CrossAttention {
    heads: usize,
    to_q: Linear,
    to_k: Linear,
    to_v: Linear,
    to_out: Linear,
    training: bool,
}

impl CrossAttention {
    pub fn new(
        dim: usize,
        context_dim: usize,
        heads: usize,
        gen: &mut Generator,
    ) -> Result<CrossAttention> {
        Ok(CrossAttention {
            heads,
            to_q: Linear::new(dim, dim, false, gen)?,
            to_k: Linear::new(context_dim, dim, false, gen)?,
            to_v: Linear::new(context_dim, dim, false, gen)?,
            to_out: Linear::new(dim, dim, true, gen)?,
            training: true,
        })
    }

    pub fn attend(&self, x: &Tensor, context: &Tensor) -> Result<Tensor> {
        let out = multi_head(
            &self.to_q.forward(x)?,
            &self.to_k.forward(context)?,
            &self.to_v.forward(context)?,
            self.heads,
        )?;
        self.to_out.forward(&out)
    }
}

impl Module for CrossAttention {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.attend(x, x)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("to_q".into(), &self.to_q),
            ("to_k".into(), &self.to_k),
            ("to_v".into(), &self.to_v),
            ("to_out.0".into(), &self.to_out),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![
            &mut self.to_q,
            &mut self.to_k,
            &mut self.to_v,
            &mut self.to_out,
        ]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "Attention".into()
    }
}

/// diffusers' `BasicTransformerBlock` (layer norms, self- then cross-attention, GEGLU).
struct TransformerBlock {
    norm1: LayerNorm,
    attn1: CrossAttention,
    norm2: LayerNorm,
    attn2: CrossAttention,
    norm3: LayerNorm,
    ff: FeedForward,
    training: bool,
}

impl TransformerBlock {
    fn new(dim: usize, context: usize, heads: usize, gen: &mut Generator) -> Result<Self> {
        let norm = || LayerNorm::new(&[dim], 1e-5, true);
        Ok(TransformerBlock {
            norm1: norm()?,
            attn1: CrossAttention::new(dim, dim, heads, gen)?,
            norm2: norm()?,
            attn2: CrossAttention::new(dim, context, heads, gen)?,
            norm3: norm()?,
            ff: FeedForward::new(dim, 4 * dim, FeedForwardActivation::Geglu, gen)?,
            training: true,
        })
    }

    fn run(&self, x: &Tensor, context: &Tensor) -> Result<Tensor> {
        let h = self.attn1.forward(&self.norm1.forward(x)?)?.add(x)?;
        let h = self
            .attn2
            .attend(&self.norm2.forward(&h)?, context)?
            .add(&h)?;
        self.ff.forward(&self.norm3.forward(&h)?)?.add(&h)
    }
}

impl Module for TransformerBlock {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.run(x, x)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("norm1".into(), &self.norm1),
            ("attn1".into(), &self.attn1),
            ("norm2".into(), &self.norm2),
            ("attn2".into(), &self.attn2),
            ("norm3".into(), &self.norm3),
            ("ff".into(), &self.ff),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![
            &mut self.norm1,
            &mut self.attn1,
            &mut self.norm2,
            &mut self.attn2,
            &mut self.norm3,
            &mut self.ff,
        ]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "BasicTransformerBlock".into()
    }
}

/// The projection in or out: a 1x1 conv on the map (SD 1.x) or a linear on the tokens (SD 2,
/// SDXL: `use_linear_projection`).
enum Projection {
    Conv(Conv2d),
    Linear(Linear),
}

impl Projection {
    fn new(linear: bool, c_in: usize, c_out: usize, gen: &mut Generator) -> Result<Self> {
        Ok(match linear {
            true => Projection::Linear(Linear::new(c_in, c_out, true, gen)?),
            false => Projection::Conv(conv(c_in, c_out, 1, 1, 0, gen)?),
        })
    }

    fn module(&self) -> &dyn Module {
        match self {
            Projection::Conv(c) => c,
            Projection::Linear(l) => l,
        }
    }

    fn module_mut(&mut self) -> &mut dyn Module {
        match self {
            Projection::Conv(c) => c,
            Projection::Linear(l) => l,
        }
    }
}

/// A 1x1 conv applied to tokens [B, T, C]: the linear map of its weight [O, C, 1, 1] over each
/// token, so the map never goes back to [B, C, H, W] for cuDNN (which transposes it in and
/// out). The bias joins the product in its dtype, as `Linear`'s does under autocast.
fn conv1x1_on_tokens(conv: &Conv2d, tokens: &Tensor) -> Result<Tensor> {
    let w = &conv.weight;
    let (o, c) = (w.shape()[0], w.shape()[1]);
    let &[b, t, _] = tokens.shape() else {
        unreachable!("tokens are [B, T, C]");
    };
    let rows = tokens.reshape_to(&[b * t, c])?;
    let y = rows.matmul(&w.reshape_to(&[o, c])?.t()?)?;
    let y = match &conv.bias {
        Some(bias) if bias.dtype() != y.dtype() => y.add(&bias.to_dtype(y.dtype())?)?,
        Some(bias) => y.add(bias)?,
        None => y,
    };
    y.reshape_to(&[b, t, o])
}

/// diffusers' `Transformer2DModel` over a [B, C, H, W] map, conditioned on context
/// [B, S, context_dim].
pub struct Transformer2d {
    norm: GroupNorm,
    proj_in: Projection,
    blocks: Vec<TransformerBlock>,
    proj_out: Projection,
    training: bool,
}

impl Transformer2d {
    /// `heads` heads of channels / heads each, `layers` transformer blocks.
    pub fn new(
        channels: usize,
        heads: usize,
        layers: usize,
        context_dim: usize,
        groups: usize,
        linear_projection: bool,
        gen: &mut Generator,
    ) -> Result<Transformer2d> {
        if heads == 0 || !channels.is_multiple_of(heads) {
            return Err(Error::invalid(
                "Transformer2DModel",
                format!("{channels} channels do not split into {heads} heads"),
            ));
        }
        Ok(Transformer2d {
            norm: GroupNorm::new(groups, channels, 1e-6, true)?,
            proj_in: Projection::new(linear_projection, channels, channels, gen)?,
            blocks: (0..layers)
                .map(|_| TransformerBlock::new(channels, context_dim, heads, gen))
                .collect::<Result<_>>()?,
            proj_out: Projection::new(linear_projection, channels, channels, gen)?,
            training: true,
        })
    }

    pub fn run(&self, x: &Tensor, context: &Tensor) -> Result<Tensor> {
        let &[b, c, h, w] = x.shape() else {
            return Err(Error::layer_input(
                "Transformer2DModel",
                "input [N, C, H, W]",
                format!("{:?}", x.shape()),
            ));
        };
        let to_tokens =
            |m: &Tensor| -> Result<Tensor> { m.reshape_to(&[b, c, h * w])?.permute(&[0, 2, 1]) };
        let to_map =
            |t: &Tensor| -> Result<Tensor> { t.permute(&[0, 2, 1])?.reshape_to(&[b, c, h, w]) };
        let normed = self.norm.forward(x)?;
        let mut tokens = match &self.proj_in {
            Projection::Conv(p) => conv1x1_on_tokens(p, &to_tokens(&normed)?)?,
            Projection::Linear(p) => p.forward(&to_tokens(&normed)?)?,
        };
        for block in &self.blocks {
            tokens = block.run(&tokens, context)?;
        }
        let out = match &self.proj_out {
            Projection::Conv(p) => to_map(&conv1x1_on_tokens(p, &tokens)?)?,
            Projection::Linear(p) => to_map(&p.forward(&tokens)?)?,
        };
        out.add(x)
    }
}

impl Module for Transformer2d {
    /// Self-conditioned (the map's own tokens as the context): for a model called without
    /// text; the UNet calls `run` with the text states.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let &[b, c, h, w] = x.shape() else {
            return self.run(x, x);
        };
        let tokens = x.reshape_to(&[b, c, h * w])?.permute(&[0, 2, 1])?;
        self.run(x, &tokens)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("norm".into(), &self.norm),
            ("proj_in".into(), self.proj_in.module()),
        ];
        c.extend(
            self.blocks
                .iter()
                .enumerate()
                .map(|(i, b)| (format!("transformer_blocks.{i}"), b as &dyn Module)),
        );
        c.push(("proj_out".into(), self.proj_out.module()));
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.norm, self.proj_in.module_mut()];
        c.extend(self.blocks.iter_mut().map(|b| b as &mut dyn Module));
        c.push(self.proj_out.module_mut());
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "Transformer2DModel".into()
    }
}
