//! diffusers' `AutoencoderKL`: the VAE of Stable Diffusion (1.x, 2.x, XL, 3 and FLUX shapes),
//! configured from its `config.json` and loaded from `diffusion_pytorch_model.safetensors`
//! with diffusers' names.
//!
//! encoder: conv_in → down blocks (resnets, then a stride-2 conv but in the last) → middle
//! (resnet, attention, resnet) → GroupNorm → SiLU → conv_out to 2 × latent channels, then
//! `quant_conv`: the mean and log-variance of the latent.
//! decoder: `post_quant_conv` → conv_in → middle → up blocks (one more resnet each, then a
//! nearest ×2 and a conv but in the last) → GroupNorm → SiLU → conv_out.

use super::blocks::{conv, Downsample, ResnetBlock, SpatialAttention, Upsample};
use crate::io::pretrained::{load_weights_named, read_config};
use crate::models::hf_config::Fields;
use crate::nn::{Conv2d, GroupNorm, Module};
use crate::{Error, Generator, Result, Tensor};
use serde_json::Value;
use std::path::Path;

/// The VAE's blocks' GroupNorm epsilon (diffusers builds them with 1e-6).
const EPS: f64 = 1e-6;

#[derive(Clone, Debug, PartialEq)]
pub struct VaeConfig {
    pub in_channels: usize,
    pub out_channels: usize,
    pub block_out_channels: Vec<usize>,
    pub layers_per_block: usize,
    pub latent_channels: usize,
    pub norm_num_groups: usize,
    /// Latents are scaled by this for the denoiser (SD 1.x: 0.18215).
    pub scaling_factor: f64,
    /// And shifted by this before scaling (SD3, FLUX).
    pub shift_factor: f64,
    pub use_quant_conv: bool,
    pub use_post_quant_conv: bool,
    pub mid_block_add_attention: bool,
    /// The image side the VAE was made for: the tile side of a tiled decode.
    pub sample_size: usize,
}

/// `sample_size`: one side, or `[h, w]` as some configs write it (the first is used, as
/// diffusers' tiling does).
fn sample_size(f: &Fields, v: &Value) -> Result<usize> {
    match v.get("sample_size") {
        Some(Value::Array(sides)) => match sides.first().and_then(Value::as_u64) {
            Some(side) if side > 0 => Ok(side as usize),
            _ => Err(f.error("sample_size: expected a positive side or [h, w]".into())),
        },
        _ => f.size("sample_size", 32),
    }
}

impl VaeConfig {
    pub fn from_json(v: &Value) -> Result<VaeConfig> {
        let f = Fields::new(v, "AutoencoderKL");
        if let Some(class) = f.string("_class_name").filter(|c| *c != "AutoencoderKL") {
            return Err(f.error(format!("`{class}` is not an AutoencoderKL")));
        }
        f.choice("act_fn", "silu", &["silu"])?;
        let channels = match v.get("block_out_channels") {
            None | Some(Value::Null) => vec![64],
            Some(list) => list
                .as_array()
                .filter(|a| !a.is_empty() && a.len() <= 8)
                .and_then(|a| {
                    a.iter()
                        .map(|c| {
                            c.as_u64()
                                .filter(|&c| c > 0 && c <= 1 << 16)
                                .map(|c| c as usize)
                        })
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| {
                    f.error(format!(
                        "`block_out_channels` must be 1 to 8 channel counts, got {list}"
                    ))
                })?,
        };
        for (key, want) in [
            ("down_block_types", "DownEncoderBlock2D"),
            ("up_block_types", "UpDecoderBlock2D"),
        ] {
            if let Some(list) = v.get(key).and_then(Value::as_array) {
                if list.len() != channels.len() {
                    return Err(f.error(format!(
                        "{key} lists {} blocks for {} block_out_channels",
                        list.len(),
                        channels.len()
                    )));
                }
                if let Some(other) = list.iter().find(|t| t.as_str() != Some(want)) {
                    return Err(f.error(format!("{key}: {other} is not supported (only {want})")));
                }
            }
        }
        let config = VaeConfig {
            in_channels: f.size("in_channels", 3)?,
            out_channels: f.size("out_channels", 3)?,
            block_out_channels: channels,
            layers_per_block: f.size("layers_per_block", 1)?,
            latent_channels: f.size("latent_channels", 4)?,
            norm_num_groups: f.size("norm_num_groups", 32)?,
            scaling_factor: f.float("scaling_factor", 0.18215)?,
            shift_factor: f.opt_float("shift_factor")?.unwrap_or(0.0),
            use_quant_conv: f.flag("use_quant_conv", true)?,
            use_post_quant_conv: f.flag("use_post_quant_conv", true)?,
            mid_block_add_attention: f.flag("mid_block_add_attention", true)?,
            sample_size: sample_size(&f, v)?,
        };
        super::check_groups(&f, &config.block_out_channels, config.norm_num_groups)?;
        Ok(config)
    }

    /// A lower bound of the parameter count: the resnets' 3x3 convolutions of the encoder
    /// (layers_per_block a block) and the decoder (one more).
    pub fn parameters_at_least(&self) -> f64 {
        let resnets = (2 * self.layers_per_block + 1) as f64;
        self.block_out_channels
            .iter()
            .map(|&c| resnets * 18.0 * (c as f64) * (c as f64))
            .sum()
    }

    /// How much smaller the latent is than the image, per side.
    pub fn downscale(&self) -> usize {
        1 << (self.block_out_channels.len() - 1)
    }
}

/// A list of resnets and the resampler after them.
struct Stage<R> {
    resnets: Vec<ResnetBlock>,
    resample: Option<R>,
    /// The resampler's name (`downsamplers` or `upsamplers`).
    resample_name: &'static str,
    training: bool,
}

impl<R: Module> Module for Stage<R> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for r in &self.resnets {
            h = r.forward(&h)?;
        }
        match &self.resample {
            Some(s) => s.forward(&h),
            None => Ok(h),
        }
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = self
            .resnets
            .iter()
            .enumerate()
            .map(|(i, r)| (format!("resnets.{i}"), r as &dyn Module))
            .collect();
        if let Some(s) = &self.resample {
            c.push((format!("{}.0", self.resample_name), s));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = self
            .resnets
            .iter_mut()
            .map(|r| r as &mut dyn Module)
            .collect();
        if let Some(s) = &mut self.resample {
            c.push(s);
        }
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        match self.resample_name {
            "downsamplers" => "DownEncoderBlock2D".into(),
            _ => "UpDecoderBlock2D".into(),
        }
    }
}

/// The middle: resnet, attention (unless `mid_block_add_attention` is off), resnet.
struct Middle {
    first: ResnetBlock,
    attention: Option<SpatialAttention>,
    second: ResnetBlock,
    training: bool,
}

impl Middle {
    fn new(c: &VaeConfig, gen: &mut Generator) -> Result<Middle> {
        let ch = *c.block_out_channels.last().unwrap_or(&0);
        let g = c.norm_num_groups;
        Ok(Middle {
            first: ResnetBlock::new(ch, ch, None, g, EPS, gen)?,
            attention: c
                .mid_block_add_attention
                .then(|| SpatialAttention::new(ch, 1, g, EPS, gen))
                .transpose()?,
            second: ResnetBlock::new(ch, ch, None, g, EPS, gen)?,
            training: true,
        })
    }
}

impl Module for Middle {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.first.forward(x)?;
        if let Some(a) = &self.attention {
            h = a.forward(&h)?;
        }
        self.second.forward(&h)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![("resnets.0".into(), &self.first)];
        if let Some(a) = &self.attention {
            c.push(("attentions.0".into(), a));
        }
        c.push(("resnets.1".into(), &self.second));
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.first];
        if let Some(a) = &mut self.attention {
            c.push(a);
        }
        c.push(&mut self.second);
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "UNetMidBlock2D".into()
    }
}

/// The encoder or the decoder: conv_in, the stages around the middle, the norm and conv_out.
struct Coder<R> {
    conv_in: Conv2d,
    stages: Vec<Stage<R>>,
    mid_block: Middle,
    conv_norm_out: GroupNorm,
    conv_out: Conv2d,
    /// The stages run before the middle (encoder) or after it (decoder).
    stages_first: bool,
    training: bool,
}

impl<R: Module> Module for Coder<R> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.conv_in.forward(x)?;
        if !self.stages_first {
            h = self.mid_block.forward(&h)?;
        }
        for s in &self.stages {
            h = s.forward(&h)?;
        }
        if self.stages_first {
            h = self.mid_block.forward(&h)?;
        }
        self.conv_out.forward(&self.conv_norm_out.forward_silu(&h)?)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let list = match self.stages_first {
            true => "down_blocks",
            false => "up_blocks",
        };
        let mut c: Vec<(String, &dyn Module)> = vec![("conv_in".into(), &self.conv_in)];
        c.extend(
            self.stages
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("{list}.{i}"), s as &dyn Module)),
        );
        c.push(("mid_block".into(), &self.mid_block));
        c.push(("conv_norm_out".into(), &self.conv_norm_out));
        c.push(("conv_out".into(), &self.conv_out));
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.conv_in];
        c.extend(self.stages.iter_mut().map(|s| s as &mut dyn Module));
        c.push(&mut self.mid_block);
        c.push(&mut self.conv_norm_out);
        c.push(&mut self.conv_out);
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        match self.stages_first {
            true => "Encoder".into(),
            false => "Decoder".into(),
        }
    }
}

fn encoder(c: &VaeConfig, gen: &mut Generator) -> Result<Coder<Downsample>> {
    let ch = &c.block_out_channels;
    let g = c.norm_num_groups;
    let mut stages = Vec::new();
    let mut c_in = ch[0];
    for (i, &c_out) in ch.iter().enumerate() {
        let resnets = (0..c.layers_per_block)
            .map(|j| ResnetBlock::new(if j == 0 { c_in } else { c_out }, c_out, None, g, EPS, gen))
            .collect::<Result<Vec<_>>>()?;
        let last = i + 1 == ch.len();
        stages.push(Stage {
            resnets,
            resample: (!last)
                .then(|| Downsample::new(c_out, 0, gen))
                .transpose()?,
            resample_name: "downsamplers",
            training: true,
        });
        c_in = c_out;
    }
    let top = ch[ch.len() - 1];
    Ok(Coder {
        conv_in: conv(c.in_channels, ch[0], 3, 1, 1, gen)?,
        stages,
        mid_block: Middle::new(c, gen)?,
        conv_norm_out: GroupNorm::new(g, top, EPS, true)?,
        conv_out: conv(top, 2 * c.latent_channels, 3, 1, 1, gen)?,
        stages_first: true,
        training: true,
    })
}

fn decoder(c: &VaeConfig, gen: &mut Generator) -> Result<Coder<Upsample>> {
    let ch: Vec<usize> = c.block_out_channels.iter().rev().copied().collect();
    let g = c.norm_num_groups;
    let mut stages = Vec::new();
    let mut c_in = ch[0];
    for (i, &c_out) in ch.iter().enumerate() {
        let resnets = (0..=c.layers_per_block)
            .map(|j| ResnetBlock::new(if j == 0 { c_in } else { c_out }, c_out, None, g, EPS, gen))
            .collect::<Result<Vec<_>>>()?;
        let last = i + 1 == ch.len();
        stages.push(Stage {
            resnets,
            resample: (!last).then(|| Upsample::new(c_out, gen)).transpose()?,
            resample_name: "upsamplers",
            training: true,
        });
        c_in = c_out;
    }
    let bottom = ch[ch.len() - 1];
    Ok(Coder {
        conv_in: conv(c.latent_channels, ch[0], 3, 1, 1, gen)?,
        stages,
        mid_block: Middle::new(c, gen)?,
        conv_norm_out: GroupNorm::new(g, bottom, EPS, true)?,
        conv_out: conv(bottom, c.out_channels, 3, 1, 1, gen)?,
        stages_first: false,
        training: true,
    })
}

/// The latent distribution of an image: a diagonal Gaussian.
pub struct LatentDistribution {
    pub mean: Tensor,
    /// log σ², clamped to [−30, 20] as diffusers does.
    pub logvar: Tensor,
}

impl LatentDistribution {
    /// mean + σ·ε with ε drawn from `gen`.
    pub fn sample(&self, gen: &mut Generator) -> Result<Tensor> {
        let eps = Tensor::randn_on(
            self.mean.shape(),
            self.mean.dtype(),
            self.mean.device(),
            Some(gen),
        )?;
        self.sample_with(&eps)
    }

    /// mean + σ·ε for a given ε of the mean's shape.
    pub fn sample_with(&self, eps: &Tensor) -> Result<Tensor> {
        self.mean
            .add(&self.logvar.mul_scalar(0.5)?.exp()?.mul(eps)?)
    }
}

pub struct AutoencoderKl {
    pub config: VaeConfig,
    encoder: Coder<Downsample>,
    decoder: Coder<Upsample>,
    quant_conv: Option<Conv2d>,
    post_quant_conv: Option<Conv2d>,
    training: bool,
}

impl AutoencoderKl {
    /// A VAE of this shape with PyTorch's default init drawn from `gen`.
    pub fn new(config: VaeConfig, gen: &mut Generator) -> Result<AutoencoderKl> {
        let z = 2 * config.latent_channels;
        let l = config.latent_channels;
        Ok(AutoencoderKl {
            encoder: encoder(&config, gen)?,
            decoder: decoder(&config, gen)?,
            quant_conv: config
                .use_quant_conv
                .then(|| conv(z, z, 1, 1, 0, gen))
                .transpose()?,
            post_quant_conv: config
                .use_post_quant_conv
                .then(|| conv(l, l, 1, 1, 0, gen))
                .transpose()?,
            config,
            training: true,
        })
    }

    /// A VAE from a diffusers folder (`config.json` and `diffusion_pytorch_model.safetensors`,
    /// its shards or its `.bin`; `vae/` inside a pipeline's folder is looked for too), every
    /// tensor required by name and shape.
    pub fn from_folder(dir: &Path) -> Result<AutoencoderKl> {
        let dir = if dir.join("vae").join("config.json").is_file() {
            dir.join("vae")
        } else {
            dir.to_path_buf()
        };
        let config = VaeConfig::from_json(&read_config(&dir)?)?;
        let weights = load_weights_named(&dir, "diffusion_pytorch_model")?;
        super::check_config_against_weights(
            "AutoencoderKL",
            config.parameters_at_least(),
            &weights,
        )?;
        let vae = AutoencoderKl::new(config, &mut Generator::new(0))?;
        vae.load_state_dict(&weights, true)
            .map_err(|e| Error::format("AutoencoderKL", format!("{}: {e}", dir.display())))?;
        Ok(vae)
    }

    /// The latent distribution of images [N, C, H, W] (H and W multiples of the
    /// downscale), unscaled.
    pub fn encode(&self, images: &Tensor) -> Result<LatentDistribution> {
        self.check_image(images)?;
        let mut h = self.encoder.forward(images)?;
        if let Some(q) = &self.quant_conv {
            h = q.forward(&h)?;
        }
        let halves = h.chunk(2, 1)?;
        Ok(LatentDistribution {
            mean: halves[0].clone(),
            logvar: halves[1].clamp(-30.0, 20.0)?,
        })
    }

    /// Images from unscaled latents [N, latent_channels, h, w].
    pub fn decode(&self, latents: &Tensor) -> Result<Tensor> {
        if latents.rank() != 4 || latents.shape()[1] != self.config.latent_channels {
            return Err(Error::layer_input(
                "AutoencoderKL decode",
                format!("latents [N, {}, h, w]", self.config.latent_channels),
                format!("{:?}", latents.shape()),
            ));
        }
        let z = match &self.post_quant_conv {
            Some(p) => p.forward(latents)?,
            None => latents.clone(),
        };
        self.decoder.forward(&z)
    }

    /// Latents as the denoiser takes them: (z − shift) · scale.
    pub fn scale_latents(&self, z: &Tensor) -> Result<Tensor> {
        z.add_scalar(-self.config.shift_factor)?
            .mul_scalar(self.config.scaling_factor)
    }

    /// The inverse of `scale_latents`.
    pub fn unscale_latents(&self, z: &Tensor) -> Result<Tensor> {
        z.mul_scalar(1.0 / self.config.scaling_factor)?
            .add_scalar(self.config.shift_factor)
    }

    fn check_image(&self, x: &Tensor) -> Result<()> {
        let m = self.config.downscale();
        let ok = x.rank() == 4
            && x.shape()[1] == self.config.in_channels
            && x.shape()[2].is_multiple_of(m)
            && x.shape()[3].is_multiple_of(m);
        match ok {
            true => Ok(()),
            false => Err(Error::layer_input(
                "AutoencoderKL encode",
                format!(
                    "images [N, {}, H, W] with H and W multiples of {m}",
                    self.config.in_channels
                ),
                format!("{:?}", x.shape()),
            )),
        }
    }
}

impl Module for AutoencoderKl {
    /// Reconstruction through the latent's mean: decode(encode(x).mean).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.decode(&self.encode(x)?.mean)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("encoder".into(), &self.encoder),
            ("decoder".into(), &self.decoder),
        ];
        if let Some(q) = &self.quant_conv {
            c.push(("quant_conv".into(), q));
        }
        if let Some(p) = &self.post_quant_conv {
            c.push(("post_quant_conv".into(), p));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.encoder, &mut self.decoder];
        if let Some(q) = &mut self.quant_conv {
            c.push(q);
        }
        if let Some(p) = &mut self.post_quant_conv {
            c.push(p);
        }
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "AutoencoderKL".into()
    }
}
