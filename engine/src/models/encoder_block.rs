//! The pre-norm transformer block that the vision and text-encoder families share (ViT, DeiT,
//! DINOv2, CLIP's and SigLIP's towers):
//!
//! x = x + γ₁ · attention(LN₁(x));  x = x + γ₂ · fc2(act(fc1(LN₂(x))))
//!
//! where γ is DINOv2's LayerScale (absent elsewhere). The families differ only in their
//! checkpoints' parameter names, which [`BlockNames`] carries, and in a few switches
//! ([`BlockConfig`]), so each family's model file holds only what is its own.

use crate::nn::{Activation, LayerNorm, Linear, Module};
use crate::ops::attention::AttentionOptions;
use crate::{DType, Error, Generator, Result, Tensor};

/// A checkpoint's names for a block's parts, relative to the block.
pub struct BlockNames {
    pub norm1: &'static str,
    pub query: &'static str,
    pub key: &'static str,
    pub value: &'static str,
    pub out: &'static str,
    pub norm2: &'static str,
    pub fc1: &'static str,
    pub fc2: &'static str,
    /// The two LayerScale vectors, where the family has them.
    pub layer_scale: Option<[&'static str; 2]>,
}

/// transformers' ViT and DeiT (`ViTLayer`).
pub const VIT_NAMES: BlockNames = BlockNames {
    norm1: "layernorm_before",
    query: "attention.attention.query",
    key: "attention.attention.key",
    value: "attention.attention.value",
    out: "attention.output.dense",
    norm2: "layernorm_after",
    fc1: "intermediate.dense",
    fc2: "output.dense",
    layer_scale: None,
};

/// transformers' DINOv2 (`Dinov2Layer`), with LayerScale.
pub const DINOV2_NAMES: BlockNames = BlockNames {
    norm1: "norm1",
    norm2: "norm2",
    fc1: "mlp.fc1",
    fc2: "mlp.fc2",
    layer_scale: Some(["layer_scale1.lambda1", "layer_scale2.lambda1"]),
    ..VIT_NAMES
};

/// transformers' CLIP and SigLIP towers (`CLIPEncoderLayer`).
pub const CLIP_NAMES: BlockNames = BlockNames {
    norm1: "layer_norm1",
    query: "self_attn.q_proj",
    key: "self_attn.k_proj",
    value: "self_attn.v_proj",
    out: "self_attn.out_proj",
    norm2: "layer_norm2",
    fc1: "mlp.fc1",
    fc2: "mlp.fc2",
    layer_scale: None,
};

/// A block's sizes and switches.
#[derive(Clone, Copy, Debug)]
pub struct BlockConfig {
    pub width: usize,
    pub heads: usize,
    pub mlp_width: usize,
    pub act: Activation,
    pub eps: f64,
    pub qkv_bias: bool,
    /// Query i sees keys 0..=i only (CLIP's text tower).
    pub causal: bool,
}

impl BlockConfig {
    /// The width must split into whole heads.
    pub fn check(&self, family: &'static str) -> Result<()> {
        if self.heads == 0 || !self.width.is_multiple_of(self.heads) {
            return Err(Error::format(
                family,
                format!(
                    "hidden_size {} is not a multiple of num_attention_heads {}",
                    self.width, self.heads
                ),
            ));
        }
        Ok(())
    }
}

pub struct EncoderBlock {
    names: &'static BlockNames,
    config: BlockConfig,
    norm1: LayerNorm,
    query: Linear,
    key: Linear,
    value: Linear,
    out: Linear,
    norm2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
    /// LayerScale γ₁ and γ₂ [width], DINOv2's, initialised to `layerscale_value`.
    layer_scale: Option<[Tensor; 2]>,
    training: bool,
}

impl EncoderBlock {
    /// A block with random weights (PyTorch's Linear init; LayerScale at `layer_scale`, which
    /// must be given exactly when the names have LayerScale).
    pub fn new(
        names: &'static BlockNames,
        config: BlockConfig,
        layer_scale: Option<f64>,
        gen: &mut Generator,
    ) -> Result<EncoderBlock> {
        let c = config;
        let (d, m) = (c.width, c.mlp_width);
        let gamma = || -> Result<Tensor> {
            Tensor::full(
                layer_scale.unwrap_or(1.0),
                &[d],
                DType::F32,
                crate::Device::Cpu,
            )?
            .requires_grad_()
        };
        let layer_scale = match names.layer_scale {
            Some(_) => Some([gamma()?, gamma()?]),
            None => None,
        };
        Ok(EncoderBlock {
            names,
            config,
            norm1: LayerNorm::new(&[d], c.eps, true)?,
            query: Linear::new(d, d, c.qkv_bias, gen)?,
            key: Linear::new(d, d, c.qkv_bias, gen)?,
            value: Linear::new(d, d, c.qkv_bias, gen)?,
            out: Linear::new(d, d, true, gen)?,
            norm2: LayerNorm::new(&[d], c.eps, true)?,
            fc1: Linear::new(d, m, true, gen)?,
            fc2: Linear::new(m, d, true, gen)?,
            layer_scale,
            training: true,
        })
    }

    /// Multi-head self-attention of x [B, T, D] (before the output projection).
    fn attend(&self, x: &Tensor) -> Result<Tensor> {
        let [b, t, d] = x.shape()[..] else {
            return Err(Error::invalid(
                "encoder block",
                format!("expects [B, T, D], got {:?}", x.shape()),
            ));
        };
        let heads = self.config.heads as isize;
        let x = crate::amp::for_products(x)?;
        let split = |l: &Linear| -> Result<Tensor> {
            l.forward(&x)?
                .reshape(&[b as isize, t as isize, heads, -1])?
                .transpose(1, 2)
        };
        let (q, k, v) = (split(&self.query)?, split(&self.key)?, split(&self.value)?);
        let opts = AttentionOptions {
            causal: self.config.causal,
            scale: None,
        };
        q.scaled_dot_product_attention(&k, &v, opts)?
            .transpose(1, 2)?
            .reshape(&[b as isize, t as isize, d as isize])
    }

    /// `y` scaled by LayerScale `i` where the block has it.
    fn scaled(&self, y: Tensor, i: usize) -> Result<Tensor> {
        match &self.layer_scale {
            Some(gamma) => y.mul(&gamma[i].to_dtype(y.dtype())?),
            None => Ok(y),
        }
    }
}

impl Module for EncoderBlock {
    /// x [B, T, D] → [B, T, D].
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let a = self.out.forward(&self.attend(&self.norm1.forward(x)?)?)?;
        let x = x.add(&self.scaled(a, 0)?)?;
        let h = self.fc1.forward(&self.norm2.forward(&x)?)?;
        let m = self.fc2.forward(&self.config.act.apply(&h)?)?;
        x.add(&self.scaled(m, 1)?)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        match (&self.layer_scale, self.names.layer_scale) {
            (Some(gamma), Some(names)) => names
                .iter()
                .zip(gamma)
                .map(|(n, g)| (n.to_string(), g.clone()))
                .collect(),
            _ => Vec::new(),
        }
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let n = self.names;
        vec![
            (n.norm1.into(), &self.norm1),
            (n.query.into(), &self.query),
            (n.key.into(), &self.key),
            (n.value.into(), &self.value),
            (n.out.into(), &self.out),
            (n.norm2.into(), &self.norm2),
            (n.fc1.into(), &self.fc1),
            (n.fc2.into(), &self.fc2),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![
            &mut self.norm1,
            &mut self.query,
            &mut self.key,
            &mut self.value,
            &mut self.out,
            &mut self.norm2,
            &mut self.fc1,
            &mut self.fc2,
        ]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        let c = &self.config;
        format!(
            "EncoderBlock(width {}, {} heads, mlp {}, {}{})",
            c.width,
            c.heads,
            c.mlp_width,
            c.act.name(),
            if c.causal { ", causal" } else { "" }
        )
    }
}

/// `n` blocks of one config.
pub fn blocks(
    n: usize,
    names: &'static BlockNames,
    config: BlockConfig,
    layer_scale: Option<f64>,
    gen: &mut Generator,
) -> Result<Vec<EncoderBlock>> {
    (0..n)
        .map(|_| EncoderBlock::new(names, config, layer_scale, gen))
        .collect()
}

/// Checks images [B, C, H, W] against a patch model's channels and patch size.
pub fn check_images(
    family: &'static str,
    images: &Tensor,
    channels: usize,
    patch: usize,
) -> Result<()> {
    let s = images.shape();
    let ok = images.rank() == 4
        && s[1] == channels
        && s[2] > 0
        && s[3] > 0
        && s[2].is_multiple_of(patch)
        && s[3].is_multiple_of(patch);
    if ok {
        return Ok(());
    }
    Err(Error::invalid(
        family,
        format!(
            "expects images [B, {channels}, H, W] with H and W multiples of {patch}, got {s:?}"
        ),
    ))
}
