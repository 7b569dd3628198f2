//! The convolutional pieces diffusers' VAEs and UNets are made of, with diffusers' parameter
//! names: `ResnetBlock2D` (GroupNorm → SiLU → conv, twice, with an optional time embedding
//! added between), `Downsample2D`, `Upsample2D`, and the single-group spatial self-attention
//! of the VAE's middle block.

use crate::nn::{Conv2d, GroupNorm, Linear, Module};
use crate::ops::rearrange::PadMode;
use crate::AttentionOptions;
use crate::{Conv2dOptions, Generator, Result, Tensor};

/// A conv with a k x k kernel, stride and padding, with bias (PyTorch's init).
pub fn conv(
    c_in: usize,
    c_out: usize,
    k: usize,
    stride: usize,
    padding: usize,
    gen: &mut Generator,
) -> Result<Conv2d> {
    let options = Conv2dOptions {
        stride: (stride, stride),
        padding: (padding, padding),
        ..Default::default()
    };
    Conv2d::new(c_in, c_out, (k, k), options, true, gen)
}

/// diffusers' `ResnetBlock2D` ("default" time embedding norm, output scale 1).
pub struct ResnetBlock {
    norm1: GroupNorm,
    conv1: Conv2d,
    /// Projects the time embedding onto the channels (the UNets' blocks; none in a VAE).
    time_emb_proj: Option<Linear>,
    norm2: GroupNorm,
    conv2: Conv2d,
    /// A 1x1 conv where the channel count changes.
    conv_shortcut: Option<Conv2d>,
    training: bool,
}

impl ResnetBlock {
    pub fn new(
        c_in: usize,
        c_out: usize,
        temb: Option<usize>,
        groups: usize,
        eps: f64,
        gen: &mut Generator,
    ) -> Result<ResnetBlock> {
        Ok(ResnetBlock {
            norm1: GroupNorm::new(groups, c_in, eps, true)?,
            conv1: conv(c_in, c_out, 3, 1, 1, gen)?,
            time_emb_proj: temb.map(|t| Linear::new(t, c_out, true, gen)).transpose()?,
            norm2: GroupNorm::new(groups, c_out, eps, true)?,
            conv2: conv(c_out, c_out, 3, 1, 1, gen)?,
            conv_shortcut: (c_in != c_out)
                .then(|| conv(c_in, c_out, 1, 1, 0, gen))
                .transpose()?,
            training: true,
        })
    }

    /// x + conv2(silu(norm2(conv1(silu(norm1(x))) + proj(silu(temb))))), the shortcut
    /// projected where the channels change.
    pub fn forward_with(&self, x: &Tensor, temb: Option<&Tensor>) -> Result<Tensor> {
        let mut h = self.conv1.forward(&self.norm1.forward_silu(x)?)?;
        if let (Some(proj), Some(t)) = (&self.time_emb_proj, temb) {
            let t = proj.forward(&t.silu()?)?;
            let [b, c] = [t.shape()[0], t.shape()[1]];
            h = h.add(&t.reshape_to(&[b, c, 1, 1])?)?;
        }
        h = self.conv2.forward(&self.norm2.forward_silu(&h)?)?;
        let shortcut = match &self.conv_shortcut {
            Some(c) => c.forward(x)?,
            None => x.clone(),
        };
        shortcut.add(&h)
    }
}

impl Module for ResnetBlock {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, None)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> =
            vec![("norm1".into(), &self.norm1), ("conv1".into(), &self.conv1)];
        if let Some(p) = &self.time_emb_proj {
            c.push(("time_emb_proj".into(), p));
        }
        c.push(("norm2".into(), &self.norm2));
        c.push(("conv2".into(), &self.conv2));
        if let Some(s) = &self.conv_shortcut {
            c.push(("conv_shortcut".into(), s));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.norm1, &mut self.conv1];
        if let Some(p) = &mut self.time_emb_proj {
            c.push(p);
        }
        c.push(&mut self.norm2);
        c.push(&mut self.conv2);
        if let Some(s) = &mut self.conv_shortcut {
            c.push(s);
        }
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "ResnetBlock2D".into()
    }
}

/// diffusers' `Downsample2D` with a conv: a stride-2 3x3 conv, after padding one row and
/// column at the bottom and right when its own padding is 0 (the VAE's encoder).
pub struct Downsample {
    conv: Conv2d,
    pad_bottom_right: bool,
    training: bool,
}

impl Downsample {
    pub fn new(channels: usize, padding: usize, gen: &mut Generator) -> Result<Downsample> {
        Ok(Downsample {
            conv: conv(channels, channels, 3, 2, padding, gen)?,
            pad_bottom_right: padding == 0,
            training: true,
        })
    }
}

impl Module for Downsample {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.pad_bottom_right {
            true => self
                .conv
                .forward(&x.pad(&[0, 1, 0, 1], PadMode::Constant(0.0))?),
            false => self.conv.forward(x),
        }
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("conv".into(), &self.conv)]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.conv]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "Downsample2D".into()
    }
}

/// diffusers' `Upsample2D` with a conv: nearest-neighbour doubling, then a 3x3 conv.
pub struct Upsample {
    conv: Conv2d,
    training: bool,
}

impl Upsample {
    pub fn new(channels: usize, gen: &mut Generator) -> Result<Upsample> {
        Ok(Upsample {
            conv: conv(channels, channels, 3, 1, 1, gen)?,
            training: true,
        })
    }
}

impl Module for Upsample {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.conv.forward(&x.upsample_nearest2d(2, 2)?)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("conv".into(), &self.conv)]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.conv]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "Upsample2D".into()
    }
}

/// Attention of queries [B, T, heads·d] over keys and values [B, S, heads·d], head by head:
/// [B, T, heads·d] out.
pub fn multi_head(q: &Tensor, k: &Tensor, v: &Tensor, heads: usize) -> Result<Tensor> {
    let split = |x: &Tensor| -> Result<Tensor> {
        let &[b, t, inner] = x.shape() else {
            return Err(crate::Error::invalid(
                "attention",
                format!("{:?} is not [B, T, C]", x.shape()),
            ));
        };
        x.reshape_to(&[b, t, heads, inner / heads])?
            .permute(&[0, 2, 1, 3])
    };
    let out = split(q)?.scaled_dot_product_attention(
        &split(k)?,
        &split(v)?,
        AttentionOptions::default(),
    )?;
    let &[b, _, t, d] = out.shape() else {
        unreachable!("attention keeps the rank");
    };
    out.permute(&[0, 2, 1, 3])?.reshape_to(&[b, t, heads * d])
}

/// Self-attention over the positions of a feature map: GroupNorm, `heads` heads, the output
/// projection, and the input added back (diffusers' `Attention` with a group norm and
/// `residual_connection`: the VAE's middle block, one head; UNet2DModel's attention blocks).
pub struct SpatialAttention {
    heads: usize,
    group_norm: GroupNorm,
    to_q: Linear,
    to_k: Linear,
    to_v: Linear,
    to_out: Linear,
    training: bool,
}

impl SpatialAttention {
    pub fn new(
        channels: usize,
        heads: usize,
        groups: usize,
        eps: f64,
        gen: &mut Generator,
    ) -> Result<SpatialAttention> {
        if heads == 0 || !channels.is_multiple_of(heads) {
            return Err(crate::Error::invalid(
                "Attention",
                format!("{channels} channels do not split into {heads} heads"),
            ));
        }
        Ok(SpatialAttention {
            heads,
            group_norm: GroupNorm::new(groups, channels, eps, true)?,
            to_q: Linear::new(channels, channels, true, gen)?,
            to_k: Linear::new(channels, channels, true, gen)?,
            to_v: Linear::new(channels, channels, true, gen)?,
            to_out: Linear::new(channels, channels, true, gen)?,
            training: true,
        })
    }
}

impl Module for SpatialAttention {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let &[b, c, h, w] = x.shape() else {
            return Err(crate::Error::layer_input(
                self.title(),
                "input [N, C, H, W]",
                format!("{:?}", x.shape()),
            ));
        };
        // [B, C, H, W] → [B, HW, C]: the positions are the tokens.
        let tokens = self
            .group_norm
            .forward(x)?
            .reshape_to(&[b, c, h * w])?
            .permute(&[0, 2, 1])?;
        let out = multi_head(
            &self.to_q.forward(&tokens)?,
            &self.to_k.forward(&tokens)?,
            &self.to_v.forward(&tokens)?,
            self.heads,
        )?;
        let out = self
            .to_out
            .forward(&out)?
            .permute(&[0, 2, 1])?
            .reshape_to(&[b, c, h, w])?;
        out.add(x)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("group_norm".into(), &self.group_norm),
            ("to_q".into(), &self.to_q),
            ("to_k".into(), &self.to_k),
            ("to_v".into(), &self.to_v),
            ("to_out.0".into(), &self.to_out),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![
            &mut self.group_norm,
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
