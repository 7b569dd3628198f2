//! Stable Diffusion's text-to-image pipeline (diffusers' `StableDiffusionPipeline` for SD 1.x
//! and 2.x folders, `StableDiffusionXLPipeline` for SDXL's, `StableDiffusion3Pipeline` for
//! SD3's, `FluxPipeline` for FLUX.1's): prompts → text states → noise → the scheduler's walk
//! with classifier-free guidance (FLUX-dev: guidance as an input) → VAE decode → images.
//!
//! - `text_to_image`: what a call asks for (`TextToImage`) and the sampling loop;
//! - `image_start`: image to image's and inpainting's start (the image's latents, the mask).

mod image_start;
mod text_to_image;

pub use image_start::mask_from_image;
pub use text_to_image::TextToImage;

use super::denoiser::Denoiser;
use super::mmdit::{FluxTransformer, Sd3Transformer};
use super::prompt_encoder::{Conditioning, PromptEncoder, PromptEncoders, PromptLayout};
use super::scheduler::{self, Scheduler};
use super::{AutoencoderKl, UNet};
use crate::nn::Module;
use crate::{no_grad, DType, Device, Error, Generator, Result, Tensor};
use serde_json::Value;
use std::path::Path;

pub struct StableDiffusion {
    /// The text encoders and tokenizers (SDXL has two, SD3 three).
    pub prompts: PromptEncoders,
    /// SDXL: without a negative prompt the unconditional input is zeros, not the encoded "".
    pub force_zeros_for_empty_prompt: bool,
    pub denoiser: Denoiser,
    pub vae: AutoencoderKl,
    /// `scheduler/scheduler_config.json`, read for each call (a walk holds state).
    scheduler_config: String,
}

pub(super) fn component(dir: &Path, name: &str) -> Result<std::path::PathBuf> {
    let sub = dir.join(name);
    match sub.is_dir() {
        true => Ok(sub),
        false => Err(Error::format(
            "StableDiffusionPipeline",
            format!("{}: the pipeline has no {name}/ folder", dir.display()),
        )),
    }
}

impl StableDiffusion {
    /// A diffusers pipeline folder: `model_index.json`, and `unet/`, `vae/`, `text_encoder/`,
    /// `tokenizer/` and `scheduler/`; SDXL's also `text_encoder_2/` and `tokenizer_2/` (a
    /// refiner's only those); SD3's `transformer/` for `unet/`, the two CLIP encoders and
    /// `text_encoder_3/` with `tokenizer_3/` (T5, optional).
    pub fn from_folder(dir: &Path) -> Result<StableDiffusion> {
        let index_path = dir.join("model_index.json");
        let text = std::fs::read_to_string(&index_path).map_err(|e| Error::io(&index_path, e))?;
        let index: Value = serde_json::from_str(&text).map_err(|e| {
            Error::format("model_index.json", format!("{}: {e}", index_path.display()))
        })?;
        // A component the index lists as [null, null] is absent.
        let listed = |name: &str| {
            index
                .get(name)
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().any(|x| !x.is_null()))
        };
        let class = index.get("_class_name").and_then(Value::as_str);
        let encoder = |i: usize| {
            let suffix = if i == 1 {
                String::new()
            } else {
                format!("_{i}")
            };
            PromptEncoder::from_folder(
                dir,
                &format!("text_encoder{suffix}"),
                &format!("tokenizer{suffix}"),
            )
        };
        let (prompts, denoiser) = match class {
            Some("StableDiffusionPipeline") | Some("StableDiffusionInpaintPipeline") => (
                PromptEncoders {
                    encoders: vec![encoder(1)?],
                    layout: PromptLayout::Sd,
                },
                Denoiser::UNet(Box::new(UNet::from_folder(&component(dir, "unet")?)?)),
            ),
            Some("StableDiffusionXLPipeline") => {
                let mut encoders = Vec::new();
                if listed("text_encoder") {
                    encoders.push(encoder(1)?);
                }
                encoders.push(encoder(2)?);
                let prompts = PromptEncoders {
                    encoders,
                    layout: PromptLayout::Sdxl,
                };
                (prompts, Denoiser::UNet(Box::new(UNet::from_folder(&component(dir, "unet")?)?)))
            }
            Some("StableDiffusion3Pipeline") => {
                let transformer = Sd3Transformer::from_folder(&component(dir, "transformer")?)?;
                let mut encoders = vec![encoder(1)?, encoder(2)?];
                if listed("text_encoder_3") {
                    encoders.push(encoder(3)?);
                }
                let prompts = PromptEncoders {
                    encoders,
                    layout: PromptLayout::Sd3 {
                        joint_width: transformer.config.joint_attention_dim,
                    },
                };
                (prompts, Denoiser::Sd3(Box::new(transformer)))
            }
            Some("FluxPipeline") => {
                let transformer = FluxTransformer::from_folder(&component(dir, "transformer")?)?;
                let prompts = PromptEncoders {
                    encoders: vec![encoder(1)?, encoder(2)?],
                    layout: PromptLayout::Flux,
                };
                (prompts, Denoiser::Flux(Box::new(transformer)))
            }
            other => {
                return Err(Error::format(
                    "model_index.json",
                    format!(
                        "{}: pipeline {} is not supported (StableDiffusionPipeline, StableDiffusionInpaintPipeline, StableDiffusionXLPipeline, StableDiffusion3Pipeline and FluxPipeline are)",
                        dir.display(),
                        other.unwrap_or("without a _class_name")
                    ),
                ))
            }
        };
        let force_zeros_for_empty_prompt = prompts.layout == PromptLayout::Sdxl
            && index
                .get("force_zeros_for_empty_prompt")
                .and_then(Value::as_bool)
                .unwrap_or(true);
        check_fit(&prompts, &denoiser, dir)?;
        let sched_path = component(dir, "scheduler")?.join("scheduler_config.json");
        let scheduler_config =
            std::fs::read_to_string(&sched_path).map_err(|e| Error::io(&sched_path, e))?;
        // Checked now, so a bad one is named at load.
        scheduler::from_config(&scheduler_config, None)?;
        let vae = AutoencoderKl::from_folder(&component(dir, "vae")?)?;
        let (c, takes) = (vae.config.latent_channels, denoiser.in_channels());
        if takes != c && takes != 2 * c + 1 {
            return Err(Error::format(
                "StableDiffusionPipeline",
                format!(
                    "{}: the denoiser takes {takes} latent channels and the VAE gives {c} (an inpainting UNet takes {})",
                    dir.display(),
                    2 * c + 1
                ),
            ));
        }
        Ok(StableDiffusion {
            prompts,
            force_zeros_for_empty_prompt,
            vae,
            denoiser,
            scheduler_config,
        })
    }

    /// The UNet, for pipelines that denoise with one.
    pub fn unet(&self) -> Option<&UNet> {
        match &self.denoiser {
            Denoiser::UNet(u) => Some(u.as_ref()),
            _ => None,
        }
    }

    pub fn device(&self) -> Device {
        self.denoiser
            .module()
            .named_parameters()
            .first()
            .map_or(Device::Cpu, |(_, p)| p.device())
    }

    /// Moves every model to `device`.
    pub fn to_device(&self, device: Device) -> Result<()> {
        self.prompts.to_device(device)?;
        self.denoiser.module().to_device(device)?;
        self.vae.to_device(device)
    }

    /// Merges a LoRA file (diffusers/PEFT or kohya layout) into the UNet and the text
    /// encoders with `strength` (diffusers' `load_lora_weights` then `fuse_lora(lora_scale)`);
    /// returns how many modules of the UNet and of the text encoders it changed. Nothing
    /// changes unless every module fits.
    pub fn add_lora(&self, path: &Path, strength: f64) -> Result<(usize, usize)> {
        use super::lora::{plan_lora, read_lora, LoraTarget};
        let modules = read_lora(path)?;
        let of = |t: LoraTarget| modules.iter().filter(|m| m.target == t).collect::<Vec<_>>();
        // Every model's modules are placed before any changes.
        let denoiser = plan_lora(self.denoiser.module(), &of(LoraTarget::Denoiser))?;
        let encoders = &self.prompts.encoders;
        let slots = self.prompts.slots();
        let stray = modules
            .iter()
            .find(|m| matches!(m.target, LoraTarget::TextEncoder(i) if !slots.contains(&i)));
        if let Some(m) = stray {
            return Err(Error::invalid(
                "add_lora",
                format!(
                    "{}: `{}` adapts a text encoder this pipeline does not have",
                    path.display(),
                    m.module
                ),
            ));
        }
        let mut text = Vec::new();
        for (e, &slot) in encoders.iter().zip(&slots) {
            text.push(plan_lora(
                e.model.module(),
                &of(LoraTarget::TextEncoder(slot)),
            )?);
        }
        let denoiser = denoiser.apply(strength)?;
        let mut changed = 0;
        for plan in text {
            changed += plan.apply(strength)?;
        }
        Ok((denoiser, changed))
    }

    /// Adds a textual-inversion file's token to the tokenizers and text encoders (diffusers'
    /// `load_textual_inversion`; an SDXL file's `clip_l` and `clip_g` vectors go to the first
    /// and second encoder); `token` names it instead of the file. Returns the token and how
    /// many vectors it has. Nothing changes unless every encoder takes its vectors.
    pub fn add_textual_inversion(
        &mut self,
        path: &Path,
        token: Option<&str>,
    ) -> Result<(String, usize)> {
        let inversion = super::textual_inversion::read_inversion(path, token)?;
        let slots = self.prompts.slots();
        let mut plan = Vec::new();
        for (slot, vectors) in &inversion.vectors {
            let Some(i) = slots.iter().position(|s| s == slot) else {
                return Err(Error::invalid(
                    "add_textual_inversion",
                    format!(
                        "{}: it has vectors for a second text encoder, which this pipeline does not have",
                        path.display()
                    ),
                ));
            };
            // Every encoder takes its vectors before any changes.
            self.prompts.encoders[i]
                .check_inversion(&inversion.token, vectors)
                .map_err(|e| {
                    Error::invalid("add_textual_inversion", format!("{}: {e}", path.display()))
                })?;
            plan.push((i, vectors));
        }
        for &(i, vectors) in &plan {
            self.prompts.encoders[i].add_inversion(&inversion.token, vectors)?;
        }
        let n = inversion.vectors.first().map_or(0, |(_, v)| v.shape()[0]);
        Ok((inversion.token, n))
    }

    /// A fresh walk of the folder's scheduler (or of `class` over its noise schedule).
    pub fn scheduler(&self, class: Option<&str>) -> Result<Box<dyn Scheduler>> {
        scheduler::from_config(&self.scheduler_config, class)
    }

    /// diffusers' default guidance scale for the pipeline: 7.5 for SD, 5 for SDXL, 7 for SD3,
    /// 3.5 for FLUX (an input of the model, not a second pass).
    pub fn default_guidance(&self) -> f64 {
        match self.prompts.layout {
            PromptLayout::Sd => 7.5,
            PromptLayout::Sdxl => 5.0,
            PromptLayout::Sd3 { .. } => 7.0,
            PromptLayout::Flux => 3.5,
        }
    }

    /// diffusers' default number of steps: 50, and 28 for SD3 and FLUX.
    pub fn default_steps(&self) -> usize {
        match self.prompts.layout {
            PromptLayout::Sd3 { .. } | PromptLayout::Flux => 28,
            _ => 50,
        }
    }

    /// How much larger each side of the image is than the latent's.
    pub fn vae_scale(&self) -> usize {
        self.vae.config.downscale()
    }

    /// What the image's sides must be multiples of: the VAE's scale times the UNet's
    /// downscale (the MMDiT's patch), and at least 8.
    pub fn size_multiple(&self) -> usize {
        (self.vae_scale() * self.denoiser.latent_multiple()).max(8)
    }

    /// The text states [N, T, width] of prompts (and SDXL's, SD3's and FLUX's pooled
    /// embedding), padded to the encoders' context (T5's: `t5_tokens`, default 256, FLUX
    /// 512). Longer prompts are cut (with one warning, as diffusers warns).
    pub fn encode_prompts(
        &self,
        prompts: &[&str],
        t5_tokens: Option<usize>,
    ) -> Result<Conditioning> {
        let t5_tokens = t5_tokens.unwrap_or(self.prompts.layout.t5_tokens());
        self.prompts.encode(prompts, self.device(), t5_tokens)
    }

    /// Images [N, 3, H, W] in [-1, 1] as the denoiser's clean latents: a draw of the VAE's
    /// latent distribution, scaled (and shifted) as training reads them (diffusers' training
    /// scripts: `latent_dist.sample() * scaling_factor`). Nothing is recorded.
    pub fn image_latents(&self, images: &Tensor, gen: &mut Generator) -> Result<Tensor> {
        no_grad(|| self.encode_latents(images, None, gen))
    }

    /// Images [N, 3, H, W] in [-1, 1] as clean latents [N, C, h, w] (F32): a draw (`draw`,
    /// or one from `gen`) of the VAE's distribution, (latent - shift) · scaling_factor (SD's
    /// and SDXL's VAEs have no shift; SD3's and FLUX's do).
    fn encode_latents(
        &self,
        images: &Tensor,
        draw: Option<&Tensor>,
        gen: &mut Generator,
    ) -> Result<Tensor> {
        let device = self.device();
        let dtype = self.vae.named_parameters()[0].1.dtype();
        let dist = self
            .vae
            .encode(&images.to_dtype(dtype)?.to_device(device)?)?;
        let sample = match draw {
            Some(z) => dist.sample_with(&z.to_dtype(dist.mean.dtype())?.to_device(device)?)?,
            None => dist.sample(gen)?,
        };
        self.vae.scale_latents(&sample.to_dtype(DType::F32)?)
    }
}

/// Images [N, H, W, 3] in [0, 1] as U8 images [H, W, 3] (rounded as diffusers' `numpy_to_pil`
/// rounds: ×255, then to the nearest).
pub fn to_u8_images(images: &Tensor) -> Result<Vec<Tensor>> {
    let u8s = images
        .mul_scalar(255.0)?
        .round()?
        .to_device(Device::Cpu)?
        .to_dtype(DType::U8)?;
    (0..images.shape()[0])
        .map(|i| u8s.narrow(0, i, 1)?.squeeze(0)?.contiguous())
        .collect()
}

/// Whether the text encoders fit the denoiser: their states' width is the UNet's
/// `cross_attention_dim` (the MMDiT's `joint_attention_dim`), and the pooled width what SDXL's
/// added conditioning (SD3's `pooled_projection_dim`) takes.
fn check_fit(prompts: &PromptEncoders, denoiser: &Denoiser, dir: &Path) -> Result<()> {
    let bad = |msg: String| {
        Error::format(
            "StableDiffusionPipeline",
            format!("{}: {msg}", dir.display()),
        )
    };
    prompts.check()?;
    let widths: Vec<String> = prompts
        .encoders
        .iter()
        .map(|e| format!("{} {}", e.name, e.width()))
        .collect();
    let pooled = |p: Option<usize>| p.map_or("none".to_string(), |p| p.to_string());
    match denoiser {
        Denoiser::UNet(unet) => {
            if !unet.config.conditional {
                return Err(bad("the UNet is not text-conditioned".into()));
            }
            if prompts.width() != unet.config.cross_attention_dim {
                return Err(bad(format!(
                    "the text encoders' width ({}) is not the UNet's cross_attention_dim {}",
                    widths.join(" + "),
                    unet.config.cross_attention_dim
                )));
            }
            match (unet.config.text_time, prompts.pooled_width()) {
                (None, _) => Ok(()),
                (Some(tt), Some(p)) if p == tt.text_embeds_dim() => Ok(()),
                (Some(tt), p) => Err(bad(format!(
                    "the UNet's added conditioning takes a pooled text embedding of {}, the text encoders give {}",
                    tt.text_embeds_dim(),
                    pooled(p)
                ))),
            }
        }
        Denoiser::Sd3(t) => match prompts.pooled_width() {
            Some(p) if p == t.config.pooled_projection_dim => Ok(()),
            p => Err(bad(format!(
                "the transformer's pooled_projection_dim is {}, the CLIP encoders' projections give {} ({})",
                t.config.pooled_projection_dim,
                pooled(p),
                widths.join(", ")
            ))),
        },
        Denoiser::Flux(t) => {
            if prompts.width() != t.config.joint_attention_dim {
                return Err(bad(format!(
                    "the transformer's joint_attention_dim is {}, the T5 encoder gives {} ({})",
                    t.config.joint_attention_dim,
                    prompts.width(),
                    widths.join(", ")
                )));
            }
            match prompts.pooled_width() {
                Some(p) if p == t.config.pooled_projection_dim => Ok(()),
                p => Err(bad(format!(
                    "the transformer's pooled_projection_dim is {}, the CLIP encoder gives {}",
                    t.config.pooled_projection_dim,
                    pooled(p)
                ))),
            }
        }
    }
}
