//! diffusers' UNets with their parameter names: `UNet2DModel` (unconditional, self-attention
//! blocks: DDPM's) and `UNet2DConditionModel` (cross-attention to text states: Stable
//! Diffusion 1.x and 2.x shapes), configured from `config.json`.
//!
//! t → sinusoidal embedding → MLP (`time_embedding`) = temb
//! x → conv_in → down blocks (resnets with temb, attention, a stride-2 conv), every output
//! kept → middle (resnet, attention, resnet) → up blocks (each resnet takes the last kept
//! output concatenated on the channels, then attention; nearest ×2 and a conv) → GroupNorm →
//! SiLU → conv_out: the prediction (noise, v or the sample, as the scheduler's config says).

mod config;
mod time;

use super::timestep::{sinusoidal, TimestepEmbedding};
use config::{down_title, up_title};
pub use config::{AttentionKind, TextTime, UNetConfig};
pub use time::AddedConditions;

use super::blocks::{conv, Downsample, ResnetBlock, SpatialAttention, Upsample};
use super::transformer2d::Transformer2d;
use crate::io::pretrained::{load_weights_named, read_config};
use crate::nn::{Conv2d, GroupNorm, Module};
use crate::{DType, Error, Generator, Result, Tensor};
use serde_json::Value;
use std::path::Path;

/// One block's attention layer.
enum Attention {
    Spatial(Box<SpatialAttention>),
    Cross(Box<Transformer2d>),
}

impl Attention {
    fn new(
        kind: AttentionKind,
        c: &UNetConfig,
        channels: usize,
        block: usize,
        gen: &mut Generator,
    ) -> Result<Option<Attention>> {
        let heads = c.heads[block];
        Ok(match kind {
            AttentionKind::None => None,
            AttentionKind::Spatial => Some(Attention::Spatial(Box::new(SpatialAttention::new(
                channels,
                heads,
                c.norm_num_groups,
                c.norm_eps,
                gen,
            )?))),
            AttentionKind::Cross => Some(Attention::Cross(Box::new(Transformer2d::new(
                channels,
                heads,
                c.transformer_layers[block],
                c.cross_attention_dim,
                c.norm_num_groups,
                c.use_linear_projection,
                gen,
            )?))),
        })
    }

    fn run(&self, x: &Tensor, context: Option<&Tensor>) -> Result<Tensor> {
        match (self, context) {
            (Attention::Spatial(a), _) => a.forward(x),
            (Attention::Cross(t), Some(ctx)) => t.run(x, ctx),
            (Attention::Cross(_), None) => Err(Error::invalid(
                "UNet2DConditionModel",
                "the cross-attention blocks need the text states (encoder_hidden_states)",
            )),
        }
    }

    fn module(&self) -> &dyn Module {
        match self {
            Attention::Spatial(a) => a.as_ref(),
            Attention::Cross(t) => t.as_ref(),
        }
    }

    fn module_mut(&mut self) -> &mut dyn Module {
        match self {
            Attention::Spatial(a) => a.as_mut(),
            Attention::Cross(t) => t.as_mut(),
        }
    }
}

/// A down, middle or up block: resnets, each followed by its attention where the block has
/// one, then the resampler.
struct Block<R> {
    resnets: Vec<ResnetBlock>,
    attentions: Vec<Attention>,
    resample: Option<R>,
    /// `downsamplers` or `upsamplers`.
    resample_name: &'static str,
    title: &'static str,
    training: bool,
}

impl<R: Module> Block<R> {
    /// A down block: every resnet's (and the resampler's) output is kept for the up path.
    fn down(
        &self,
        x: &Tensor,
        temb: &Tensor,
        ctx: Option<&Tensor>,
        kept: &mut Vec<Tensor>,
    ) -> Result<Tensor> {
        let mut h = x.clone();
        for (i, r) in self.resnets.iter().enumerate() {
            h = r.forward_with(&h, Some(temb))?;
            if let Some(a) = self.attentions.get(i) {
                h = a.run(&h, ctx)?;
            }
            kept.push(h.clone());
        }
        if let Some(s) = &self.resample {
            h = s.forward(&h)?;
            kept.push(h.clone());
        }
        Ok(h)
    }

    /// An up block: each resnet first takes the newest kept output beside its input.
    fn up(
        &self,
        x: &Tensor,
        temb: &Tensor,
        ctx: Option<&Tensor>,
        kept: &mut Vec<Tensor>,
    ) -> Result<Tensor> {
        let mut h = x.clone();
        for (i, r) in self.resnets.iter().enumerate() {
            let skip = kept
                .pop()
                .ok_or_else(|| Error::invalid("UNet", "the up path ran out of skip connections"))?;
            h = r.forward_with(&Tensor::cat(&[h, skip], 1)?, Some(temb))?;
            if let Some(a) = self.attentions.get(i) {
                h = a.run(&h, ctx)?;
            }
        }
        match &self.resample {
            Some(s) => s.forward(&h),
            None => Ok(h),
        }
    }

    /// The middle: resnet, then (attention, resnet) pairs.
    fn middle(&self, x: &Tensor, temb: &Tensor, ctx: Option<&Tensor>) -> Result<Tensor> {
        let mut h = self.resnets[0].forward_with(x, Some(temb))?;
        for (i, r) in self.resnets[1..].iter().enumerate() {
            if let Some(a) = self.attentions.get(i) {
                h = a.run(&h, ctx)?;
            }
            h = r.forward_with(&h, Some(temb))?;
        }
        Ok(h)
    }
}

impl<R: Module> Module for Block<R> {
    fn forward(&self, _x: &Tensor) -> Result<Tensor> {
        Err(Error::invalid(
            self.title,
            "a UNet block runs inside the UNet (it needs the time embedding)",
        ))
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = Vec::new();
        c.extend(
            self.attentions
                .iter()
                .enumerate()
                .map(|(i, a)| (format!("attentions.{i}"), a.module())),
        );
        c.extend(
            self.resnets
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("resnets.{i}"), r as &dyn Module)),
        );
        if let Some(s) = &self.resample {
            c.push((format!("{}.0", self.resample_name), s));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = self
            .attentions
            .iter_mut()
            .map(Attention::module_mut)
            .collect();
        c.extend(self.resnets.iter_mut().map(|r| r as &mut dyn Module));
        if let Some(s) = &mut self.resample {
            c.push(s);
        }
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        self.title.into()
    }
}

pub struct UNet {
    pub config: UNetConfig,
    /// The latent side the model was made for (`sample_size`), when the config says.
    pub sample_size: Option<usize>,
    conv_in: Conv2d,
    time_embedding: TimestepEmbedding,
    /// SDXL's MLP over the pooled text and the size numbers (`add_embedding`).
    add_embedding: Option<TimestepEmbedding>,
    down_blocks: Vec<Block<Downsample>>,
    mid_block: Block<Downsample>,
    up_blocks: Vec<Block<Upsample>>,
    conv_norm_out: GroupNorm,
    conv_out: Conv2d,
    training: bool,
}

impl UNet {
    /// A UNet of this shape with PyTorch's default init drawn from `gen`.
    pub fn new(config: UNetConfig, gen: &mut Generator) -> Result<UNet> {
        // Far beyond any published UNet (SDXL's is 2.6e9): a typo, not a model.
        if config.parameters_at_least() > 5e10 {
            return Err(Error::invalid(
                "UNet",
                format!(
                    "the config describes at least {:.3e} parameters",
                    config.parameters_at_least()
                ),
            ));
        }
        let c = &config;
        let ch = &c.block_out_channels;
        let n = ch.len();
        let temb = 4 * ch[0];
        let (g, eps) = (c.norm_num_groups, c.norm_eps);
        let mut down_blocks = Vec::new();
        let mut c_in = ch[0];
        for (i, &c_out) in ch.iter().enumerate() {
            let mut resnets = Vec::new();
            let mut attentions = Vec::new();
            for j in 0..c.layers_per_block {
                let from = if j == 0 { c_in } else { c_out };
                resnets.push(ResnetBlock::new(from, c_out, Some(temb), g, eps, gen)?);
                attentions.extend(Attention::new(c.down[i], c, c_out, i, gen)?);
            }
            let last = i + 1 == n;
            down_blocks.push(Block {
                resnets,
                attentions,
                resample: (!last)
                    .then(|| Downsample::new(c_out, c.downsample_padding, gen))
                    .transpose()?,
                resample_name: "downsamplers",
                title: down_title(c.down[i]),
                training: true,
            });
            c_in = c_out;
        }
        let top = ch[n - 1];
        let mid_block = Block {
            resnets: vec![
                ResnetBlock::new(top, top, Some(temb), g, eps, gen)?,
                ResnetBlock::new(top, top, Some(temb), g, eps, gen)?,
            ],
            attentions: Attention::new(c.mid, c, top, n - 1, gen)?
                .into_iter()
                .collect(),
            resample: None,
            resample_name: "downsamplers",
            title: match c.mid {
                AttentionKind::Cross => "UNetMidBlock2DCrossAttn",
                _ => "UNetMidBlock2D",
            },
            training: true,
        };
        let rev: Vec<usize> = ch.iter().rev().copied().collect();
        let mut up_blocks = Vec::new();
        let mut prev = rev[0];
        for (i, &c_out) in rev.iter().enumerate() {
            let skip_in = rev[(i + 1).min(n - 1)];
            let block = n - 1 - i;
            let mut resnets = Vec::new();
            let mut attentions = Vec::new();
            for j in 0..=c.layers_per_block {
                let skip = if j == c.layers_per_block {
                    skip_in
                } else {
                    c_out
                };
                let from = if j == 0 { prev } else { c_out };
                resnets.push(ResnetBlock::new(
                    from + skip,
                    c_out,
                    Some(temb),
                    g,
                    eps,
                    gen,
                )?);
                attentions.extend(Attention::new(c.up[i], c, c_out, block, gen)?);
            }
            let last = i + 1 == n;
            up_blocks.push(Block {
                resnets,
                attentions,
                resample: (!last).then(|| Upsample::new(c_out, gen)).transpose()?,
                resample_name: "upsamplers",
                title: up_title(c.up[i]),
                training: true,
            });
            prev = c_out;
        }
        Ok(UNet {
            conv_in: conv(c.in_channels, ch[0], 3, 1, 1, gen)?,
            time_embedding: TimestepEmbedding::new(ch[0], temb, gen)?,
            add_embedding: c
                .text_time
                .map(|tt| TimestepEmbedding::new(tt.input_dim, temb, gen))
                .transpose()?,
            down_blocks,
            mid_block,
            up_blocks,
            conv_norm_out: GroupNorm::new(g, ch[0], eps, true)?,
            conv_out: conv(ch[0], c.out_channels, 3, 1, 1, gen)?,
            config,
            sample_size: None,
            training: true,
        })
    }

    /// A UNet from a diffusers folder (`config.json` and `diffusion_pytorch_model.*`; `unet/`
    /// inside a pipeline's folder is looked for too), every tensor required by name and shape.
    pub fn from_folder(dir: &Path) -> Result<UNet> {
        let dir = if dir.join("unet").join("config.json").is_file() {
            dir.join("unet")
        } else {
            dir.to_path_buf()
        };
        let json = read_config(&dir)?;
        let config = UNetConfig::from_json(&json)?;
        let weights = load_weights_named(&dir, "diffusion_pytorch_model")?;
        super::check_config_against_weights("UNet", config.parameters_at_least(), &weights)?;
        let mut unet = UNet::new(config, &mut Generator::new(0))?;
        unet.sample_size = json
            .get("sample_size")
            .and_then(Value::as_u64)
            .map(|s| s as usize);
        unet.load_state_dict(&weights, true)
            .map_err(|e| Error::format("UNet", format!("{}: {e}", dir.display())))?;
        Ok(unet)
    }

    /// Writes a folder diffusers' `from_pretrained` (and `from_folder`) reads: config.json and
    /// diffusion_pytorch_model.safetensors with diffusers' names.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let path = dir.join("config.json");
        let text = serde_json::to_string_pretty(&self.config.to_json(self.sample_size))
            .expect("JSON values serialize");
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))?;
        let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
        crate::io::safetensors::save(
            dir.join("diffusion_pytorch_model.safetensors"),
            &self.state_dict(),
            Some(meta),
        )
    }

    /// The prediction for noisy samples [B, C, H, W] at `timesteps` (one per sample, or one
    /// for all: [B] or [1]) under text states [B, S, cross_attention_dim] (conditional UNets).
    pub fn predict(
        &self,
        sample: &Tensor,
        timesteps: &Tensor,
        context: Option<&Tensor>,
    ) -> Result<Tensor> {
        self.predict_with(sample, timesteps, context, None)
    }

    /// `predict` with SDXL's added conditioning (`added_cond_kwargs`), which a `text_time`
    /// UNet requires.
    pub fn predict_with(
        &self,
        sample: &Tensor,
        timesteps: &Tensor,
        context: Option<&Tensor>,
        added: Option<&AddedConditions>,
    ) -> Result<Tensor> {
        let c = &self.config;
        let m = c.downscale();
        let &[b, ch, h, w] = sample.shape() else {
            return Err(self.bad_sample(sample));
        };
        if ch != c.in_channels || !h.is_multiple_of(m) || !w.is_multiple_of(m) {
            return Err(self.bad_sample(sample));
        }
        // Timesteps come as host numbers as often as tensors; they go where the sample is.
        let timesteps = timesteps.to_device(sample.device())?;
        let t = match timesteps.numel() {
            1 => timesteps.reshape_to(&[1])?.expand(&[b])?,
            n if n == b => timesteps.reshape_to(&[b])?,
            n => {
                return Err(Error::invalid(
                    "UNet",
                    format!("{n} timesteps for a batch of {b}: give one, or one per sample"),
                ))
            }
        };
        if let Some(ctx) = context {
            if ctx.rank() != 3 || ctx.shape()[0] != b || ctx.shape()[2] != c.cross_attention_dim {
                return Err(Error::layer_input(
                    "UNet2DConditionModel",
                    format!("text states [{b}, S, {}]", c.cross_attention_dim),
                    format!("{:?}", ctx.shape()),
                ));
            }
        } else if c.conditional {
            return Err(Error::invalid(
                "UNet2DConditionModel",
                "the text states (encoder_hidden_states) are required",
            ));
        }
        let context = context.filter(|_| c.conditional);
        let features = sinusoidal(&t, c.block_out_channels[0], c.freq_shift, c.flip_sin_to_cos)?
            .to_dtype(sample.dtype())?;
        let mut temb = self.time_embedding.forward(&features)?;
        if let Some(mlp) = &self.add_embedding {
            temb = temb.add(&mlp.forward(&time::added_features(c, added, b, sample)?)?)?;
        }
        let x = match c.center_input_sample {
            true => sample.mul_scalar(2.0)?.add_scalar(-1.0)?,
            false => sample.clone(),
        };
        let mut h = self.conv_in.forward(&x)?;
        let mut kept = vec![h.clone()];
        for block in &self.down_blocks {
            h = block.down(&h, &temb, context, &mut kept)?;
        }
        h = self.mid_block.middle(&h, &temb, context)?;
        for block in &self.up_blocks {
            h = block.up(&h, &temb, context, &mut kept)?;
        }
        self.conv_out.forward(&self.conv_norm_out.forward_silu(&h)?)
    }

    fn bad_sample(&self, x: &Tensor) -> Error {
        Error::layer_input(
            "UNet",
            format!(
                "samples [N, {}, H, W] with H and W multiples of {}",
                self.config.in_channels,
                self.config.downscale()
            ),
            format!("{:?}", x.shape()),
        )
    }
}

impl Module for UNet {
    /// An unconditional UNet at timestep 0; `predict` takes the timestep and the text.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let t = Tensor::zeros(&[1], DType::F32, x.device())?;
        self.predict(x, &t, None)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("conv_in".into(), &self.conv_in),
            ("time_embedding".into(), &self.time_embedding),
        ];
        if let Some(a) = &self.add_embedding {
            c.push(("add_embedding".into(), a));
        }
        c.extend(
            self.down_blocks
                .iter()
                .enumerate()
                .map(|(i, b)| (format!("down_blocks.{i}"), b as &dyn Module)),
        );
        c.push(("mid_block".into(), &self.mid_block));
        c.extend(
            self.up_blocks
                .iter()
                .enumerate()
                .map(|(i, b)| (format!("up_blocks.{i}"), b as &dyn Module)),
        );
        c.push(("conv_norm_out".into(), &self.conv_norm_out));
        c.push(("conv_out".into(), &self.conv_out));
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.conv_in, &mut self.time_embedding];
        if let Some(a) = &mut self.add_embedding {
            c.push(a);
        }
        c.extend(self.down_blocks.iter_mut().map(|b| b as &mut dyn Module));
        c.push(&mut self.mid_block);
        c.extend(self.up_blocks.iter_mut().map(|b| b as &mut dyn Module));
        c.push(&mut self.conv_norm_out);
        c.push(&mut self.conv_out);
        c
    }

    crate::nn::training_field!();

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn title(&self) -> String {
        match self.config.conditional {
            true => "UNet2DConditionModel".into(),
            false => "UNet2DModel".into(),
        }
    }
}
