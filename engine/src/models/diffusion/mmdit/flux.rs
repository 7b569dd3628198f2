//! diffusers' `FluxTransformer2DModel` (FLUX.1): the packed latent (2×2 patches as 64
//! channels) and T5's states through `num_layers` double-stream blocks (the joint block, text
//! first, q/k RMS norms, rotary positions) and then `num_single_layers` single-stream blocks
//! (text and image as one sequence: attention and MLP side by side from one modulated norm),
//! conditioned on the timestep, FLUX-dev's guidance value and CLIP's pooled text.

use super::conditioning::{self, per_sample, Conditioning};
use super::joint_attention::{AttentionParts, JointAttention, Rotary};
use super::joint_block::{BlockParts, JointBlock};
use super::modulation::{modulate, norm, AdaNorm, AdaNormKind};
use crate::models::hf_config::Fields;
use crate::nn::{Linear, Module};
use crate::{DType, Device, Error, Generator, Result, Tensor};
use std::path::Path;

const WHAT: &str = "FluxTransformer2DModel";

#[derive(Clone, Debug, PartialEq)]
pub struct FluxConfig {
    pub patch_size: usize,
    /// The packed latent's channels (the VAE's × 4).
    pub in_channels: usize,
    pub out_channels: usize,
    pub num_layers: usize,
    pub num_single_layers: usize,
    pub attention_head_dim: usize,
    pub num_attention_heads: usize,
    pub joint_attention_dim: usize,
    pub pooled_projection_dim: usize,
    /// FLUX-dev's distilled guidance: the guidance value is embedded like the timestep.
    pub guidance_embeds: bool,
    /// The head's channels given to each position axis (text/index, row, column).
    pub axes_dims_rope: Vec<usize>,
}

impl FluxConfig {
    pub fn read(f: &Fields) -> Result<FluxConfig> {
        let in_channels = f.size("in_channels", 64)?;
        let axes_given = f
            .floats("axes_dims_rope")?
            .unwrap_or_else(|| vec![16.0, 56.0, 56.0]);
        let axes: Vec<usize> = axes_given
            .iter()
            .map(|&a| match a >= 0.0 && a.fract() == 0.0 && a <= 4096.0 {
                true => Ok(a as usize),
                false => Err(f.error(format!(
                    "axes_dims_rope {axes_given:?} must be head channels per axis (whole numbers up to 4096)"
                ))),
            })
            .collect::<Result<_>>()?;
        let config = FluxConfig {
            patch_size: f.size("patch_size", 1)?,
            in_channels,
            out_channels: f.size("out_channels", in_channels)?,
            num_layers: f.size("num_layers", 19)?,
            num_single_layers: f.count("num_single_layers", 38)?,
            attention_head_dim: f.size("attention_head_dim", 128)?,
            num_attention_heads: f.size("num_attention_heads", 24)?,
            joint_attention_dim: f.size("joint_attention_dim", 4096)?,
            pooled_projection_dim: f.size("pooled_projection_dim", 768)?,
            guidance_embeds: f.flag("guidance_embeds", false)?,
            axes_dims_rope: axes,
        };
        if config.patch_size != 1 {
            return Err(f.error(format!(
                "patch_size {} is not supported (FLUX packs 2x2 latent patches into the channels and uses 1)",
                config.patch_size
            )));
        }
        let sum: usize = config.axes_dims_rope.iter().sum();
        if config.axes_dims_rope.len() != 3
            || sum != config.attention_head_dim
            || config.axes_dims_rope.iter().any(|a| a % 2 == 1)
        {
            return Err(f.error(format!(
                "axes_dims_rope {:?} must be three even sizes adding up to attention_head_dim {}",
                config.axes_dims_rope, config.attention_head_dim
            )));
        }
        if !config.in_channels.is_multiple_of(4) {
            return Err(f.error(format!(
                "in_channels {} is not a packed 2x2 latent (a multiple of 4)",
                config.in_channels
            )));
        }
        Ok(config)
    }

    pub fn dim(&self) -> usize {
        self.num_attention_heads * self.attention_head_dim
    }

    fn parameters_at_least(&self) -> f64 {
        let d = self.dim() as f64;
        (self.num_layers as f64 * 24.0 + self.num_single_layers as f64 * 12.0) * d * d
    }
}

/// The rotary angles of tokens with 3-axis positions `ids` [S, 3] (diffusers' `FluxPosEmbed`,
/// θ 10000): per axis a, pairs of frequency 1 / θ^(2i / d_a), the axes' pairs one after
/// another; pair p's angle at channels p and p + D/2 (`Rotary`'s de-interleaved order).
/// Computed in f64 and rounded to F32; cos and sin stacked, [2, S, D], on the host.
fn rotary_table(ids: &[[f64; 3]], axes: &[usize]) -> Result<Tensor> {
    let d: usize = axes.iter().sum();
    let (mut cos, mut sin) = (
        Vec::with_capacity(ids.len() * d),
        Vec::with_capacity(ids.len() * d),
    );
    for pos in ids {
        let mut angles = Vec::with_capacity(d / 2);
        for (axis, &dim) in axes.iter().enumerate() {
            for i in 0..dim / 2 {
                let freq = 1.0 / 10000f64.powf((2 * i) as f64 / dim as f64);
                // diffusers takes the positions as f32 before the f64 product.
                angles.push((pos[axis] as f32) as f64 * freq);
            }
        }
        for _ in 0..2 {
            cos.extend(angles.iter().map(|a| a.cos()));
            sin.extend(angles.iter().map(|a| a.sin()));
        }
    }
    cos.extend(sin);
    Tensor::from_f64s(&cos, &[2, ids.len(), d], DType::F32)
}

/// The rotary angles of `ids` on `device`, from the table cache: a resolution's angles are
/// computed once, and a captured step finds them there.
pub fn rotary_angles(ids: &[[f64; 3]], axes: &[usize], device: Device) -> Result<Rotary> {
    let bits: Vec<u64> = ids.iter().flatten().map(|v| v.to_bits()).collect();
    let table =
        crate::ops::constant_table::cached("FLUX rotary angles", (bits, axes), device, || {
            rotary_table(ids, axes)
        })?;
    let (n, d) = (ids.len(), table.shape()[2]);
    Ok(Rotary {
        cos: table.narrow(0, 0, 1)?.reshape_to(&[n, d])?,
        sin: table.narrow(0, 1, 1)?.reshape_to(&[n, d])?,
    })
}

/// `FluxSingleTransformerBlock`: x = [text, image]; from one modulated norm, attention (no
/// output projection) and a GELU MLP side by side, projected back together and gated.
struct SingleBlock {
    norm: AdaNorm,
    proj_mlp: Linear,
    attn: JointAttention,
    proj_out: Linear,
    training: bool,
}

impl SingleBlock {
    fn new(dim: usize, heads: usize, gen: &mut Generator) -> Result<SingleBlock> {
        let parts = AttentionParts {
            qk_norm: true,
            text: None,
            image_out: false,
            text_first: true,
        };
        Ok(SingleBlock {
            norm: AdaNorm::new(dim, AdaNormKind::ZeroSingle, gen)?,
            proj_mlp: Linear::new(dim, 4 * dim, true, gen)?,
            attn: JointAttention::new(dim, heads, parts, gen)?,
            proj_out: Linear::new(5 * dim, dim, true, gen)?,
            training: true,
        })
    }

    fn run(&self, x: &Tensor, temb: &Tensor, rotary: Option<&Rotary>) -> Result<Tensor> {
        let m = self.norm.vectors(temb)?;
        let normed = modulate(&norm(x)?, &m[0], &m[1])?;
        let mlp = self.proj_mlp.forward(&normed)?.gelu_tanh()?;
        let (attn, _) = self.attn.attend(&normed, None, rotary)?;
        let h = self.proj_out.forward(&Tensor::cat(&[attn, mlp], 2)?)?;
        x.add(&h.mul(&m[2])?)
    }
}

impl Module for SingleBlock {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let temb = x.mean_dims(&[1], false)?;
        self.run(x, &temb, None)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("norm".into(), &self.norm),
            ("proj_mlp".into(), &self.proj_mlp),
            ("attn".into(), &self.attn),
            ("proj_out".into(), &self.proj_out),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![
            &mut self.norm,
            &mut self.proj_mlp,
            &mut self.attn,
            &mut self.proj_out,
        ]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "FluxSingleTransformerBlock".into()
    }
}

pub struct FluxTransformer {
    pub config: FluxConfig,
    x_embedder: Linear,
    conditioning: Conditioning,
    blocks: Vec<JointBlock>,
    single_blocks: Vec<SingleBlock>,
    norm_out: AdaNorm,
    proj_out: Linear,
    training: bool,
}

/// What one FLUX prediction reads besides the latent tokens.
pub struct FluxInputs<'a> {
    /// T5's states [B, S, joint_attention_dim].
    pub context: &'a Tensor,
    /// CLIP's pooled text [B, pooled_projection_dim].
    pub pooled: &'a Tensor,
    /// Timesteps in [0, 1] (σ), [B] or [1].
    pub timesteps: &'a Tensor,
    /// FLUX-dev's guidance value, [B] or [1].
    pub guidance: Option<&'a Tensor>,
    /// The image tokens' positions (0, row, column) [N]; the text's are zeros.
    pub image_ids: &'a [[f64; 3]],
}

impl FluxTransformer {
    pub fn new(config: FluxConfig, gen: &mut Generator) -> Result<FluxTransformer> {
        let d = config.dim();
        let heads = config.num_attention_heads;
        let parts = BlockParts {
            qk_norm: true,
            context_pre_only: false,
            dual_attention: false,
            text_first: true,
        };
        Ok(FluxTransformer {
            x_embedder: Linear::new(config.in_channels, d, true, gen)?,
            conditioning: Conditioning::new(
                WHAT,
                d,
                config.joint_attention_dim,
                config.pooled_projection_dim,
                config.guidance_embeds,
                gen,
            )?,
            blocks: (0..config.num_layers)
                .map(|_| JointBlock::new(d, heads, parts, gen))
                .collect::<Result<_>>()?,
            single_blocks: (0..config.num_single_layers)
                .map(|_| SingleBlock::new(d, heads, gen))
                .collect::<Result<_>>()?,
            norm_out: AdaNorm::new(d, AdaNormKind::Continuous, gen)?,
            proj_out: Linear::new(d, config.out_channels, true, gen)?,
            config,
            training: true,
        })
    }

    /// A diffusers folder (`transformer/` of a FLUX pipeline): config.json and
    /// diffusion_pytorch_model safetensors (sharded or not), every tensor required.
    pub fn from_folder(dir: &Path) -> Result<FluxTransformer> {
        conditioning::from_folder(
            dir,
            WHAT,
            FluxConfig::read,
            FluxConfig::parameters_at_least,
            |c| FluxTransformer::new(c, &mut Generator::new(0)),
        )
    }

    /// The velocity for packed latent tokens x [B, N, in_channels]: [B, N, out_channels].
    pub fn predict(&self, x: &Tensor, inputs: &FluxInputs) -> Result<Tensor> {
        let c = &self.config;
        let &[b, n, ch] = x.shape() else {
            return Err(Error::layer_input(
                WHAT,
                "packed latents [B, N, C]",
                format!("{:?}", x.shape()),
            ));
        };
        if ch != c.in_channels || inputs.image_ids.len() != n {
            return Err(Error::layer_input(
                WHAT,
                format!(
                    "packed latents [B, {}, {}]",
                    inputs.image_ids.len(),
                    c.in_channels
                ),
                format!("{:?}", x.shape()),
            ));
        }
        let dtype = x.dtype();
        // diffusers: the value in the model's dtype, times 1000.
        let scaled = |t: &Tensor, name: &str| -> Result<Tensor> {
            per_sample(t, b, WHAT, name, x)?
                .to_dtype(dtype)?
                .mul_scalar(1000.0)
        };
        let guidance = inputs
            .guidance
            .map(|g| scaled(g, "guidance values"))
            .transpose()?;
        let (temb, mut context) = self.conditioning.embed(
            &scaled(inputs.timesteps, "timesteps")?,
            guidance.as_ref(),
            inputs.context,
            inputs.pooled,
            dtype,
        )?;
        let s = context.shape()[1];
        let mut ids = vec![[0.0; 3]; s];
        ids.extend_from_slice(inputs.image_ids);
        let rotary = rotary_angles(&ids, &c.axes_dims_rope, x.device())?;
        let mut x = self.x_embedder.forward(x)?;
        for block in &self.blocks {
            let (nx, nc) = block.run(&x, &context, &temb, Some(&rotary))?;
            x = nx;
            context = nc.expect("FLUX's double blocks keep the text stream");
        }
        let mut joint = Tensor::cat(&[context, x], 1)?;
        for block in &self.single_blocks {
            joint = block.run(&joint, &temb, Some(&rotary))?;
        }
        let x = joint.narrow(1, s, n)?;
        let m = self.norm_out.vectors(&temb)?;
        self.proj_out.forward(&modulate(&norm(&x)?, &m[1], &m[0])?)
    }
}

/// Latents [B, C, H, W] as FLUX's tokens [B, (H/2)(W/2), 4C] (diffusers' `_pack_latents`:
/// each 2×2 patch's channels, then its rows and columns).
pub fn pack_latents(latents: &Tensor) -> Result<Tensor> {
    let &[b, c, h, w] = latents.shape() else {
        return Err(Error::layer_input(
            WHAT,
            "latents [B, C, H, W]",
            format!("{:?}", latents.shape()),
        ));
    };
    if h % 2 == 1 || w % 2 == 1 {
        return Err(Error::invalid(
            WHAT,
            format!("latents {h}x{w} do not split into 2x2 patches"),
        ));
    }
    latents
        .reshape_to(&[b, c, h / 2, 2, w / 2, 2])?
        .permute(&[0, 2, 4, 1, 3, 5])?
        .reshape_to(&[b, (h / 2) * (w / 2), c * 4])
}

/// The inverse of `pack_latents` for an h × w latent.
pub fn unpack_latents(tokens: &Tensor, h: usize, w: usize) -> Result<Tensor> {
    let &[b, _, c4] = tokens.shape() else {
        unreachable!("tokens are [B, N, C]");
    };
    tokens
        .reshape_to(&[b, h / 2, w / 2, c4 / 4, 2, 2])?
        .permute(&[0, 3, 1, 4, 2, 5])?
        .reshape_to(&[b, c4 / 4, h, w])
}

/// The image tokens' positions of an h × w latent: (0, row, column) of each 2×2 patch.
pub fn image_ids(h: usize, w: usize) -> Vec<[f64; 3]> {
    (0..h / 2)
        .flat_map(|r| (0..w / 2).map(move |c| [0.0, r as f64, c as f64]))
        .collect()
}

impl Module for FluxTransformer {
    fn forward(&self, _x: &Tensor) -> Result<Tensor> {
        Err(Error::invalid(
            WHAT,
            "the transformer needs a timestep, text states and pooled text: call predict",
        ))
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![("x_embedder".into(), &self.x_embedder)];
        c.extend(self.conditioning.children());
        c.extend(
            self.blocks
                .iter()
                .enumerate()
                .map(|(i, b)| (format!("transformer_blocks.{i}"), b as &dyn Module)),
        );
        c.extend(
            self.single_blocks
                .iter()
                .enumerate()
                .map(|(i, b)| (format!("single_transformer_blocks.{i}"), b as &dyn Module)),
        );
        c.push(("norm_out".into(), &self.norm_out));
        c.push(("proj_out".into(), &self.proj_out));
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.x_embedder];
        c.extend(self.conditioning.children_mut());
        c.extend(self.blocks.iter_mut().map(|b| b as &mut dyn Module));
        c.extend(self.single_blocks.iter_mut().map(|b| b as &mut dyn Module));
        c.push(&mut self.norm_out);
        c.push(&mut self.proj_out);
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        WHAT.into()
    }
}
