//! diffusers' `SD3Transformer2DModel` (SD3, and SD3.5 with q/k norms and dual attention):
//!
//! latents → patches + positions (`pos_embed`) ─┐
//! text states → `context_embedder` ────────────┼→ `transformer_blocks` → `norm_out` → `proj_out`
//! timestep (sin-cos, 256) → MLP ─┐             │                                → unpatchify
//! pooled text → MLP ─────────────┴→ temb ──────┘

use super::conditioning::{self, per_sample, Conditioning};
use super::joint_block::{BlockParts, JointBlock};
use super::modulation::{modulate, norm, AdaNorm, AdaNormKind};
use super::patch_embed::PatchEmbed;
use crate::models::hf_config::Fields;
use crate::nn::{Linear, Module};
use crate::{Error, Generator, Result, Tensor};
use std::path::Path;

const WHAT: &str = "SD3Transformer2DModel";

#[derive(Clone, Debug, PartialEq)]
pub struct Sd3Config {
    pub sample_size: usize,
    pub patch_size: usize,
    pub in_channels: usize,
    pub out_channels: usize,
    pub num_layers: usize,
    pub attention_head_dim: usize,
    pub num_attention_heads: usize,
    /// The text states' width (T5's, with CLIP's padded to it).
    pub joint_attention_dim: usize,
    pub pooled_projection_dim: usize,
    pub pos_embed_max_size: usize,
    /// Blocks with SD3.5's second, image-only attention.
    pub dual_attention_layers: Vec<usize>,
    /// SD3.5's RMS norms of q and k per head.
    pub qk_norm: bool,
}

impl Sd3Config {
    pub fn read(f: &Fields) -> Result<Sd3Config> {
        let heads = f.size("num_attention_heads", 18)?;
        let head_dim = f.size("attention_head_dim", 64)?;
        let in_channels = f.size("in_channels", 16)?;
        let dual = match f.floats("dual_attention_layers")? {
            None => Vec::new(),
            Some(v) => v
                .iter()
                .map(|&i| match i >= 0.0 && i.fract() == 0.0 {
                    true => Ok(i as usize),
                    false => Err(f.error(format!(
                        "dual_attention_layers {v:?} must be block indices (whole numbers from 0)"
                    ))),
                })
                .collect::<Result<_>>()?,
        };
        let qk_norm = match f.string("qk_norm") {
            None => false,
            Some("rms_norm") => true,
            Some(other) => {
                return Err(f.error(format!(
                    "qk_norm `{other}` is not supported (SD3.5's rms_norm is)"
                )))
            }
        };
        let config = Sd3Config {
            sample_size: f.size("sample_size", 128)?,
            patch_size: f.size("patch_size", 2)?,
            in_channels,
            out_channels: f.size("out_channels", in_channels)?,
            num_layers: f.size("num_layers", 18)?,
            attention_head_dim: head_dim,
            num_attention_heads: heads,
            joint_attention_dim: f.size("joint_attention_dim", 4096)?,
            pooled_projection_dim: f.size("pooled_projection_dim", 2048)?,
            pos_embed_max_size: f.size("pos_embed_max_size", 96)?,
            dual_attention_layers: dual,
            qk_norm,
        };
        let caption = f.size("caption_projection_dim", config.dim())?;
        if caption != config.dim() {
            return Err(f.error(format!(
                "caption_projection_dim {caption} is not the width of the blocks ({heads} heads of {head_dim})"
            )));
        }
        // The table is computed whole: refuse one past any image a model is made for.
        if config.pos_embed_max_size > 1024 {
            return Err(f.error(format!(
                "pos_embed_max_size {} is past 1024 patches a side",
                config.pos_embed_max_size
            )));
        }
        if !config.dim().is_multiple_of(4) {
            return Err(f.error(format!(
                "the width {} must be divisible by 4 for the position table",
                config.dim()
            )));
        }
        if let Some(&i) = config
            .dual_attention_layers
            .iter()
            .find(|&&i| i >= config.num_layers)
        {
            return Err(f.error(format!(
                "dual_attention_layers names block {i} of {}",
                config.num_layers
            )));
        }
        Ok(config)
    }

    /// The blocks' width: heads × head width.
    pub fn dim(&self) -> usize {
        self.num_attention_heads * self.attention_head_dim
    }

    /// A lower bound of the parameter count (the blocks' attention and feed-forward, and the
    /// position table, which the weights hold as `pos_embed.pos_embed`).
    fn parameters_at_least(&self) -> f64 {
        let d = self.dim() as f64;
        let grid = self.pos_embed_max_size as f64;
        self.num_layers as f64 * 12.0 * d * d + grid * grid * d
    }
}

pub struct Sd3Transformer {
    pub config: Sd3Config,
    pos_embed: PatchEmbed,
    conditioning: Conditioning,
    blocks: Vec<JointBlock>,
    norm_out: AdaNorm,
    proj_out: Linear,
    training: bool,
}

impl Sd3Transformer {
    pub fn new(config: Sd3Config, gen: &mut Generator) -> Result<Sd3Transformer> {
        let d = config.dim();
        let p = config.patch_size;
        let n = config.num_layers;
        Ok(Sd3Transformer {
            pos_embed: PatchEmbed::new(
                config.in_channels,
                d,
                p,
                config.pos_embed_max_size,
                config.sample_size / p,
                gen,
            )?,
            conditioning: Conditioning::new(
                WHAT,
                d,
                config.joint_attention_dim,
                config.pooled_projection_dim,
                false,
                gen,
            )?,
            blocks: (0..n)
                .map(|i| {
                    let parts = BlockParts {
                        qk_norm: config.qk_norm,
                        context_pre_only: i + 1 == n,
                        dual_attention: config.dual_attention_layers.contains(&i),
                        text_first: false,
                    };
                    JointBlock::new(d, config.num_attention_heads, parts, gen)
                })
                .collect::<Result<_>>()?,
            norm_out: AdaNorm::new(d, AdaNormKind::Continuous, gen)?,
            proj_out: Linear::new(d, p * p * config.out_channels, true, gen)?,
            config,
            training: true,
        })
    }

    /// A diffusers folder (`transformer/` of a pipeline, or the model's own): config.json and
    /// diffusion_pytorch_model safetensors (sharded or not), every tensor required.
    pub fn from_folder(dir: &Path) -> Result<Sd3Transformer> {
        conditioning::from_folder(
            dir,
            WHAT,
            Sd3Config::read,
            Sd3Config::parameters_at_least,
            |c| Sd3Transformer::new(c, &mut Generator::new(0)),
        )
    }

    /// The prediction (the flow's velocity) for latents [B, C, H, W] at timesteps [B] or [1]
    /// (0..1000, sigma × 1000) under text states [B, S, joint_attention_dim] and pooled text
    /// [B, pooled_projection_dim].
    pub fn predict(
        &self,
        latents: &Tensor,
        timesteps: &Tensor,
        context: &Tensor,
        pooled: &Tensor,
    ) -> Result<Tensor> {
        let c = &self.config;
        let &[b, ch, h, w] = latents.shape() else {
            return Err(Error::layer_input(
                WHAT,
                "latents [B, C, H, W]",
                format!("{:?}", latents.shape()),
            ));
        };
        if ch != c.in_channels {
            return Err(Error::layer_input(
                WHAT,
                format!("latents of {} channels", c.in_channels),
                format!("{:?}", latents.shape()),
            ));
        }
        let t = per_sample(timesteps, b, WHAT, "timesteps", latents)?;
        let mut x = self.pos_embed.forward(latents)?;
        let (temb, mut context) =
            self.conditioning
                .embed(&t, None, context, pooled, latents.dtype())?;
        for block in &self.blocks {
            let (nx, nc) = block.run(&x, &context, &temb, None)?;
            x = nx;
            if let Some(nc) = nc {
                context = nc;
            }
        }
        let m = self.norm_out.vectors(&temb)?;
        let x = self
            .proj_out
            .forward(&modulate(&norm(&x)?, &m[1], &m[0])?)?;
        let p = c.patch_size;
        let (gh, gw) = (h / p, w / p);
        x.reshape_to(&[b, gh, gw, p, p, c.out_channels])?
            .permute(&[0, 5, 1, 3, 2, 4])?
            .reshape_to(&[b, c.out_channels, h, w])
    }
}

impl Module for Sd3Transformer {
    fn forward(&self, _x: &Tensor) -> Result<Tensor> {
        Err(Error::invalid(
            WHAT,
            "the transformer needs a timestep, text states and pooled text: call predict",
        ))
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![("pos_embed".into(), &self.pos_embed)];
        c.extend(self.conditioning.children());
        c.extend(
            self.blocks
                .iter()
                .enumerate()
                .map(|(i, b)| (format!("transformer_blocks.{i}"), b as &dyn Module)),
        );
        c.push(("norm_out".into(), &self.norm_out));
        c.push(("proj_out".into(), &self.proj_out));
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.pos_embed];
        c.extend(self.conditioning.children_mut());
        c.extend(self.blocks.iter_mut().map(|b| b as &mut dyn Module));
        c.push(&mut self.norm_out);
        c.push(&mut self.proj_out);
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        WHAT.into()
    }
}
