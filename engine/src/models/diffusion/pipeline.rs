//! Stable Diffusion's text-to-image pipeline (diffusers' `StableDiffusionPipeline` for SD 1.x
//! and 2.x folders, `StableDiffusionXLPipeline` for SDXL's, `StableDiffusion3Pipeline` for
//! SD3's, `FluxPipeline` for FLUX.1's): prompts → text states → noise → the scheduler's walk
//! with classifier-free guidance (FLUX-dev: guidance as an input) → VAE decode → images.

use super::denoiser::Denoiser;
use super::mmdit::{FluxTransformer, Sd3Transformer};
use super::prompt_encoder::{Conditioning, PromptEncoder, PromptEncoders, PromptLayout};
use super::scheduler::{self, Scheduler};
use super::{AddedConditions, AutoencoderKl, UNet};
use crate::nn::Module;
use crate::{no_grad, DType, Device, Error, Generator, Result, Tensor};
use serde_json::Value;
use std::path::Path;

/// What one text-to-image call asks for.
#[derive(Clone, Debug)]
pub struct TextToImage {
    pub prompts: Vec<String>,
    /// One negative prompt for all, or one per prompt; empty is "" (the unconditional text).
    pub negative: Vec<String>,
    pub steps: usize,
    /// Classifier-free guidance scale; at 1 or below the unconditional pass is skipped.
    pub guidance: f64,
    /// The image size; `None` is the UNet's `sample_size` times the VAE's downscale.
    pub size: Option<(usize, usize)>,
    pub seed: u64,
    /// Another scheduler class over the folder's noise schedule.
    pub scheduler: Option<String>,
    /// DDIM's η.
    pub eta: f64,
    /// Starting latents [N, C, h, w] (before the scheduler's noise scale) instead of noise
    /// drawn from `seed`.
    pub latents: Option<Tensor>,
    /// Image-to-image: images [N or 1, 3, H, W] in [-1, 1] to start from, noised `strength`
    /// of the way (diffusers' `StableDiffusionImg2ImgPipeline`); they set the size.
    pub init_image: Option<Tensor>,
    /// How much of the walk an init image goes through (1: all of it, the image only sets
    /// the colours' start; near 0: the image comes back nearly unchanged).
    pub strength: f64,
    /// The image start's noise given instead of drawn (to replay another run): the draw of
    /// the VAE's latent distribution and the noise added to the latents.
    pub init_noise: Option<(Tensor, Tensor)>,
    /// A 9-channel inpainting UNet's masked-image draw given instead of drawn (its latent
    /// distribution's, to replay another run).
    pub init_masked_draw: Option<Tensor>,
    /// Inpainting: where to redraw the init image, [N or 1, 1, H, W] in [0, 1] (at or above
    /// 0.5: redrawn; below: kept). After every step the latents outside the mask are set back
    /// to the image's, noised to the next step's level (diffusers'
    /// `StableDiffusionInpaintPipeline` with a 4-channel UNet); at strength 1 the mask's
    /// inside starts from pure noise.
    pub mask: Option<Tensor>,
    /// Decode with the VAE tile by tile (diffusers' `enable_tiling`), so images larger than
    /// the VAE was made for decode in bounded memory.
    pub tiled_vae: bool,
    /// How many tokens T5 reads (SD3); `None` is diffusers' default, 256.
    pub max_sequence_length: Option<usize>,
}

impl TextToImage {
    /// The denoising steps a call runs: all of them, or for an init image the last
    /// int(steps · strength) (diffusers' `get_timesteps`).
    pub fn steps_run(&self) -> usize {
        match self.init_image {
            Some(_) => ((self.steps as f64 * self.strength) as usize).min(self.steps),
            None => self.steps,
        }
    }
}

impl Default for TextToImage {
    fn default() -> Self {
        TextToImage {
            prompts: Vec::new(),
            negative: Vec::new(),
            steps: 50,
            guidance: 7.5,
            size: None,
            seed: 0,
            scheduler: None,
            eta: 0.0,
            latents: None,
            init_image: None,
            strength: 0.8,
            init_noise: None,
            init_masked_draw: None,
            tiled_vae: false,
            max_sequence_length: None,
            mask: None,
        }
    }
}

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
        no_grad(|| {
            let dtype = self.vae.named_parameters()[0].1.dtype();
            let dist = self
                .vae
                .encode(&images.to_dtype(dtype)?.to_device(self.device())?)?;
            self.vae
                .scale_latents(&dist.sample(gen)?.to_dtype(DType::F32)?)
        })
    }

    /// Images [N, H, W, 3] (F32 in [0, 1]) for the prompts; `progress(step, steps)` after
    /// each denoising step.
    pub fn generate(
        &self,
        ask: &TextToImage,
        progress: &mut dyn FnMut(usize, usize) -> Result<()>,
    ) -> Result<Tensor> {
        no_grad(|| self.generate_inner(ask, progress))
    }

    fn generate_inner(
        &self,
        ask: &TextToImage,
        progress: &mut dyn FnMut(usize, usize) -> Result<()>,
    ) -> Result<Tensor> {
        let n = ask.prompts.len();
        if n == 0 {
            return Err(Error::invalid("generate", "no prompts"));
        }
        let scale = self.vae_scale();
        let multiple = self.size_multiple();
        let (height, width) = match (ask.size, &ask.init_image) {
            (Some(s), _) => s,
            (None, Some(img)) if img.rank() == 4 => (img.shape()[2], img.shape()[3]),
            (None, _) => {
                let side = self.denoiser.sample_size().unwrap_or(64) * scale;
                (side, side)
            }
        };
        if height == 0
            || width == 0
            || !height.is_multiple_of(multiple)
            || !width.is_multiple_of(multiple)
        {
            return Err(Error::invalid(
                "generate",
                format!("{width}x{height}: the width and height must be positive multiples of {multiple} for this model"),
            ));
        }
        let mut sched = self.scheduler(ask.scheduler.as_deref())?;
        // FLUX-style dynamic shifting reads the image's token count.
        let patch = self.denoiser.latent_multiple();
        sched.set_image_tokens((height / scale / patch) * (width / scale / patch));
        sched.set_eta(ask.eta)?;
        match &self.denoiser {
            // FluxPipeline walks σ from 1 to 1/steps evenly before the shift.
            Denoiser::Flux(_) if ask.scheduler.is_none() => {
                let n = ask.steps.max(1);
                let sigmas: Vec<f64> = (0..n)
                    .map(|i| match n {
                        1 => 1.0,
                        _ => 1.0 + (1.0 / n as f64 - 1.0) * i as f64 / (n - 1) as f64,
                    })
                    .collect();
                sched.set_sigmas(&sigmas)?;
            }
            _ => sched.set_timesteps(ask.steps)?,
        }
        let prompts: Vec<&str> = ask.prompts.iter().map(String::as_str).collect();
        // Classifier-free guidance: a second, unconditional pass (not for FLUX, which takes
        // the scale as an input).
        let guided = ask.guidance > 1.0 && !matches!(self.denoiser, Denoiser::Flux(_));
        let cond = {
            let cond = self.encode_prompts(&prompts, ask.max_sequence_length)?;
            match guided {
                false => cond,
                true => {
                    let negative: Vec<&str> = match ask.negative.len() {
                        0 => vec![""; n],
                        1 => vec![ask.negative[0].as_str(); n],
                        m if m == n => ask.negative.iter().map(String::as_str).collect(),
                        m => {
                            return Err(Error::invalid(
                                "generate",
                                format!(
                                "{m} negative prompts for {n} prompts: give one, or one per prompt"
                            ),
                            ))
                        }
                    };
                    let uncond = match ask.negative.is_empty() && self.force_zeros_for_empty_prompt
                    {
                        true => cond.zeros_like()?,
                        false => self.encode_prompts(&negative, ask.max_sequence_length)?,
                    };
                    Conditioning::cat(&uncond, &cond)?
                }
            }
        };
        let added = self.added_conditions(&cond, (height, width))?;
        let device = self.device();
        // The latents have the VAE's channels (an inpainting UNet reads more beside them).
        let shape = [
            n,
            self.vae.config.latent_channels,
            height / scale,
            width / scale,
        ];
        let mut noise = Generator::new(ask.seed.wrapping_add(1));
        let dtype = self.denoiser.module().named_parameters()[0].1.dtype();
        let start = match &ask.init_image {
            Some(image) => self.image_start(ask, image, &shape, &mut *sched, dtype)?,
            None => {
                if ask.mask.is_some() {
                    return Err(Error::invalid(
                        "generate",
                        "a mask needs an image to inpaint (the image option)",
                    ));
                }
                if self.inpainting_unet() {
                    return Err(Error::invalid(
                        "generate",
                        "this is an inpainting UNet: it needs an image and a mask (the image and mask options)",
                    ));
                }
                ImageStart {
                    latents: self
                        .noise_start(ask, &shape)?
                        .mul_scalar(sched.init_noise_sigma())?,
                    first: 0,
                    keep: None,
                    condition: None,
                }
            }
        };
        let (mut latents, first) = (start.latents, start.first);
        let steps = sched.timesteps().len();
        for i in first..steps {
            let t =
                Tensor::from_f64s(&[sched.timesteps()[i]], &[1], DType::F32)?.to_device(device)?;
            let input = match guided {
                true => Tensor::cat(&[latents.clone(), latents.clone()], 0)?,
                false => latents.clone(),
            };
            let input = sched.scale_model_input(&input)?;
            let input = match &start.condition {
                Some(c) => {
                    let c = match guided {
                        true => Tensor::cat(&[c.clone(), c.clone()], 0)?,
                        false => c.clone(),
                    };
                    Tensor::cat(&[input, c], 1)?
                }
                None => input,
            }
            .to_dtype(dtype)?;
            let pred = self
                .denoiser
                .predict(&input, &t, &cond, added.as_ref(), ask.guidance)?;
            let pred = match guided {
                false => pred,
                true => {
                    let halves = pred.chunk(2, 0)?;
                    let (uncond, cond) = (&halves[0], &halves[1]);
                    uncond.add(&cond.sub(uncond)?.mul_scalar(ask.guidance)?)?
                }
            };
            latents = sched.step(&pred.to_dtype(DType::F32)?, &latents, &mut noise)?;
            if let Some(keep) = &start.keep {
                // Outside the mask: the image, at the next step's noise level.
                let image = match i + 1 < steps {
                    true => sched.add_noise(&keep.clean, &keep.noise, i + 1)?,
                    false => keep.clean.clone(),
                };
                latents = keep
                    .mask
                    .mul(&latents)?
                    .add(&keep.mask.neg()?.add_scalar(1.0)?.mul(&image)?)?;
            }
            progress(i + 1 - first, steps - first)?;
        }
        let latents = self.vae.unscale_latents(&latents)?.to_dtype(dtype)?;
        let image = match ask.tiled_vae {
            true => self.vae.decode_tiled(&latents)?,
            false => self.vae.decode(&latents)?,
        }
        .to_dtype(DType::F32)?;
        // [-1, 1] → [0, 1], channels last.
        image
            .mul_scalar(0.5)?
            .add_scalar(0.5)?
            .clamp(0.0, 1.0)?
            .permute(&[0, 2, 3, 1])?
            .contiguous()
    }
}

impl StableDiffusion {
    /// SDXL's added conditioning for a batch: the pooled embeddings, and each image's original
    /// size, crop corner and target size as diffusers defaults them (the image's size, (0, 0),
    /// the image's size).
    fn added_conditions(
        &self,
        cond: &Conditioning,
        (height, width): (usize, usize),
    ) -> Result<Option<AddedConditions>> {
        match self.unet() {
            Some(unet) if unet.config.text_time.is_some() => {}
            _ => return Ok(None),
        }
        let text_embeds = cond.pooled.clone().ok_or_else(|| {
            Error::invalid(
                "generate",
                "the UNet takes a pooled text embedding, which no text encoder of the pipeline gives",
            )
        })?;
        let b = text_embeds.shape()[0];
        let (h, w) = (height as f64, width as f64);
        let ids = [h, w, 0.0, 0.0, h, w].repeat(b);
        let time_ids = Tensor::from_f64s(&ids, &[b, 6], DType::F32)?.to_device(self.device())?;
        Ok(Some(AddedConditions {
            text_embeds,
            time_ids,
        }))
    }

    /// Text to image's start: noise [shape] from `seed`, or the given latents.
    fn noise_start(&self, ask: &TextToImage, shape: &[usize; 4]) -> Result<Tensor> {
        let device = self.device();
        match &ask.latents {
            Some(l) if l.shape() != shape => Err(Error::ShapeMismatch {
                op: "generate latents",
                lhs: shape.to_vec(),
                rhs: l.shape().to_vec(),
            }),
            Some(l) => l.to_dtype(DType::F32)?.to_device(device),
            None => {
                let mut gen = Generator::new(ask.seed);
                Tensor::randn_on(shape, DType::F32, device, Some(&mut gen))
            }
        }
    }

    /// Image to image's start: the images' latents (a draw of the VAE's distribution, scaled)
    /// noised to the step `strength` of the way from the end, and that step; with a mask, what
    /// the steps keep outside it (and at strength 1, pure noise inside it, as diffusers'
    /// inpainting starts).
    fn image_start(
        &self,
        ask: &TextToImage,
        image: &Tensor,
        shape: &[usize; 4],
        sched: &mut dyn Scheduler,
        dtype: DType,
    ) -> Result<ImageStart> {
        let [n, _, h, w] = *shape;
        let ok = image.rank() == 4
            && (image.shape()[0] == n || image.shape()[0] == 1)
            && image.shape()[1] == self.vae.config.in_channels
            && image.shape()[2] == h * self.vae_scale()
            && image.shape()[3] == w * self.vae_scale();
        if !ok {
            return Err(Error::invalid(
                "generate",
                format!(
                    "the init image must be [{n} or 1, {}, {}, {}] in [-1, 1], got {:?}",
                    self.vae.config.in_channels,
                    h * self.vae_scale(),
                    w * self.vae_scale(),
                    image.shape()
                ),
            ));
        }
        if !(0.0..=1.0).contains(&ask.strength) {
            return Err(Error::invalid(
                "generate",
                format!("strength {} is outside [0, 1]", ask.strength),
            ));
        }
        let steps = sched.timesteps().len();
        let run = ask.steps_run();
        if run == 0 {
            return Err(Error::invalid(
                "generate",
                format!(
                    "strength {} of {steps} steps leaves no step to run",
                    ask.strength
                ),
            ));
        }
        let first = steps - run;
        sched.set_begin_index(first)?;
        let device = self.device();
        let mut gen = Generator::new(ask.seed);
        // The recorded draws (to replay another run) or fresh ones, in diffusers' order.
        let (given_draw, given_noise) = match &ask.init_noise {
            Some((a, b)) => (Some(a.clone()), Some(b.clone())),
            None => (None, None),
        };
        let inpainting_unet = self.inpainting_unet();
        let pure_noise = ask.mask.is_some() && ask.strength >= 1.0;
        // The image's clean latents: image to image, and blended inpainting; a 9-channel
        // inpainting UNet starting from pure noise never reads them.
        let clean = match inpainting_unet && pure_noise {
            true => None,
            false => Some(self.latents_of(image, given_draw.as_ref(), shape, dtype, &mut gen)?),
        };
        let noise = match given_noise {
            Some(z) => z.to_dtype(DType::F32)?.to_device(device)?,
            None => Tensor::randn_on(shape, DType::F32, device, Some(&mut gen))?,
        };
        let latents = match (&clean, pure_noise) {
            (Some(clean), false) => sched.add_noise(clean, &noise, first)?,
            _ => noise.mul_scalar(sched.init_noise_sigma())?,
        };
        let Some(mask) = &ask.mask else {
            return Ok(ImageStart {
                latents,
                first,
                keep: None,
                condition: None,
            });
        };
        let latent_mask = self.latent_mask(mask, shape)?;
        if inpainting_unet {
            // The UNet reads the mask and the masked image's latents beside the latents.
            let binary = mask
                .to_dtype(DType::F32)?
                .to_device(device)?
                .ge_scalar(0.5)?
                .to_dtype(DType::F32)?;
            let masked = image
                .to_dtype(DType::F32)?
                .to_device(device)?
                .mul(&binary.neg()?.add_scalar(1.0)?)?;
            let masked = self.latents_of(
                &masked,
                ask.init_masked_draw.as_ref(),
                shape,
                dtype,
                &mut gen,
            )?;
            return Ok(ImageStart {
                latents,
                first,
                keep: None,
                condition: Some(Tensor::cat(&[latent_mask, masked], 1)?),
            });
        }
        Ok(ImageStart {
            latents,
            first,
            keep: Some(Kept {
                clean: clean.expect("blended inpainting encodes the image"),
                noise,
                mask: latent_mask,
            }),
            condition: None,
        })
    }

    /// Whether the UNet reads the mask and the masked image beside the latents (a 9-channel
    /// inpainting checkpoint: latent channels + 1 + latent channels).
    fn inpainting_unet(&self) -> bool {
        let c = self.vae.config.latent_channels;
        self.denoiser.in_channels() == 2 * c + 1
    }

    /// Images [N or 1, 3, H, W] in [-1, 1] as clean latents [N, C, h, w]: a draw (`draw`, or
    /// one from `gen`) of the VAE's distribution, (latent - shift) · scaling_factor.
    fn latents_of(
        &self,
        images: &Tensor,
        draw: Option<&Tensor>,
        shape: &[usize; 4],
        dtype: DType,
        gen: &mut Generator,
    ) -> Result<Tensor> {
        let device = self.device();
        let dist = self
            .vae
            .encode(&images.to_dtype(dtype)?.to_device(device)?)?;
        let sample = match draw {
            Some(z) => dist.sample_with(&z.to_dtype(dist.mean.dtype())?.to_device(device)?)?,
            None => dist.sample(gen)?,
        };
        // SD's and SDXL's VAEs have no shift; SD3's does.
        let clean = self.vae.scale_latents(&sample.to_dtype(DType::F32)?)?;
        match clean.shape()[0] == shape[0] {
            true => Ok(clean),
            false => clean.expand(shape)?.contiguous(),
        }
    }

    /// An inpainting mask [N or 1, 1, H, W] as the latents see it: binarized at 0.5 and taken
    /// at every `vae_scale`-th pixel (torch's nearest interpolation to the latent size).
    fn latent_mask(&self, mask: &Tensor, shape: &[usize; 4]) -> Result<Tensor> {
        let [n, _, h, w] = *shape;
        let s = self.vae_scale();
        let ok = mask.rank() == 4
            && (mask.shape()[0] == n || mask.shape()[0] == 1)
            && mask.shape()[1] == 1
            && mask.shape()[2] == h * s
            && mask.shape()[3] == w * s;
        if !ok {
            let batch = match n {
                1 => "1".to_string(),
                n => format!("{n} or 1"),
            };
            return Err(Error::invalid(
                "generate",
                format!(
                    "the mask must be [{batch}, 1, {}, {}] like the image, got {:?}",
                    h * s,
                    w * s,
                    mask.shape()
                ),
            ));
        }
        let m = mask.shape()[0];
        let binary = mask
            .to_dtype(DType::F32)?
            .to_device(self.device())?
            .ge_scalar(0.5)?
            .to_dtype(DType::F32)?;
        let picked = binary
            .reshape_to(&[m, 1, h, s, w, s])?
            .narrow(3, 0, 1)?
            .narrow(5, 0, 1)?
            .reshape_to(&[m, 1, h, w])?;
        picked.expand(&[n, 1, h, w])?.contiguous()
    }
}

/// Where the walk starts, and for inpainting what it keeps.
struct ImageStart {
    latents: Tensor,
    /// The first step run.
    first: usize,
    keep: Option<Kept>,
    /// A 9-channel inpainting UNet's extra input: the latent mask and the masked image's
    /// latents [N, 1 + C, h, w].
    condition: Option<Tensor>,
}

/// Inpainting's kept part: the image's clean latents, the noise they are renoised with, and
/// the latent mask (1: redrawn).
struct Kept {
    clean: Tensor,
    noise: Tensor,
    mask: Tensor,
}

/// An inpainting mask from an image (U8 [H, W, 3], white where to redraw) as diffusers' mask
/// processor makes it: Pillow's grayscale (L), resized (Lanczos) to `size` (height, width),
/// [1, 1, H, W] in [0, 1] (the pipeline binarizes it at 0.5).
pub fn mask_from_image(image: &Tensor, (h, w): (usize, usize)) -> Result<Tensor> {
    use crate::vision::color_jitter::luma;
    use crate::vision::image::{rgb_to_tensor, tensor_to_rgb};
    use crate::vision::pil_resize::{resize_pil, PilFilter};
    let mut rgb = tensor_to_rgb(image)?;
    for p in rgb.pixels_mut() {
        let l = luma(&p.0);
        p.0 = [l, l, l];
    }
    if (rgb.height() as usize, rgb.width() as usize) != (h, w) {
        rgb = resize_pil(&rgb, w, h, PilFilter::Lanczos);
    }
    rgb_to_tensor(rgb)?
        .narrow(2, 0, 1)?
        .to_dtype(DType::F32)?
        .mul_scalar(1.0 / 255.0)?
        .permute(&[2, 0, 1])?
        .unsqueeze(0)?
        .contiguous()
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
