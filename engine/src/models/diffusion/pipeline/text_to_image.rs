//! One text-to-image call: what it asks for, and the walk from noise (or an image's start) to
//! images.

use super::image_start::ImageStart;
use super::StableDiffusion;
use crate::models::diffusion::denoise_step::DenoiseStep;
use crate::models::diffusion::denoiser::Denoiser;
use crate::models::diffusion::prompt_encoder::Conditioning;
use crate::models::diffusion::AddedConditions;
use crate::{no_grad, DType, Error, Generator, Result, Tensor};

/// What one text-to-image call asks for.
#[derive(Clone, Debug)]
pub struct TextToImage {
    pub prompts: Vec<String>,
    /// One negative prompt for all, or one per prompt; empty is "" (the unconditional text).
    pub negative: Vec<String>,
    pub steps: usize,
    /// Classifier-free guidance scale; at 1 or below the unconditional pass is skipped. FLUX
    /// takes it as an input of the model instead (its distilled guidance).
    pub guidance: f64,
    /// FLUX's true classifier-free guidance (diffusers' `true_cfg_scale`): above 1, and with
    /// a negative prompt, a second pass on the negative prompt mixed at this scale beside the
    /// distilled guidance. The other models guide by `guidance`.
    pub true_cfg: f64,
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
    /// How many tokens T5 reads (SD3, FLUX; at most 512); `None` is diffusers' default
    /// (SD3 256, FLUX 512).
    pub max_sequence_length: Option<usize>,
    /// On CUDA, capture the denoiser's step as a CUDA graph after the first step (one launch
    /// per step instead of one per kernel); `false` runs each step op by op.
    pub cuda_graph: bool,
}

impl Default for TextToImage {
    fn default() -> Self {
        TextToImage {
            prompts: Vec::new(),
            negative: Vec::new(),
            steps: 50,
            guidance: 7.5,
            true_cfg: 1.0,
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
            cuda_graph: true,
        }
    }
}

impl StableDiffusion {
    /// The denoising steps `ask` runs: all of them, or for an init image the last part of the
    /// walk, as each diffusers pipeline rounds it (`get_timesteps`): the UNet pipelines run
    /// int(steps · strength), SD3's and FLUX's start at int(steps - steps · strength) and run
    /// the rest (5 steps at 0.7: 3 and 4).
    pub fn steps_run(&self, ask: &TextToImage) -> usize {
        if ask.init_image.is_none() {
            return ask.steps;
        }
        let part = ask.steps as f64 * ask.strength;
        match self.denoiser {
            Denoiser::UNet(_) => (part as usize).min(ask.steps),
            Denoiser::Sd3(_) | Denoiser::Flux(_) => {
                ask.steps - ((ask.steps as f64 - part).max(0.0) as usize).min(ask.steps)
            }
        }
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
        // Classifier-free guidance: a second pass on the negative (or empty) prompt, mixed at
        // this scale. FLUX takes `guidance` as an input instead; its true CFG needs a negative
        // prompt, as diffusers' does.
        if ask.true_cfg != 1.0 {
            if !matches!(self.denoiser, Denoiser::Flux(_)) {
                return Err(Error::invalid(
                    "generate",
                    format!("true CFG ({}) is FLUX's second guidance; this model's classifier-free guidance is its guidance scale", ask.true_cfg),
                ));
            }
            if ask.negative.is_empty() {
                return Err(Error::invalid(
                    "generate",
                    format!(
                        "FLUX's true CFG ({}) mixes in a pass on the negative prompt: give one",
                        ask.true_cfg
                    ),
                ));
            }
        }
        let cfg = match self.denoiser {
            Denoiser::Flux(_) => {
                (ask.true_cfg > 1.0 && !ask.negative.is_empty()).then_some(ask.true_cfg)
            }
            _ => (ask.guidance > 1.0).then_some(ask.guidance),
        };
        let guided = cfg.is_some();
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
            Some(image) => self.image_start(ask, image, &shape, &mut *sched)?,
            None => {
                if ask.mask.is_some() {
                    return Err(Error::invalid(
                        "generate",
                        "a mask needs an init image to inpaint",
                    ));
                }
                if self.inpainting_unet() {
                    return Err(Error::invalid(
                        "generate",
                        "this is an inpainting UNet: it needs an init image and a mask",
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
        let mut denoise = DenoiseStep::new(
            &self.denoiser,
            &cond,
            added.as_ref(),
            ask.guidance,
            device,
            ask.cuda_graph,
        )?;
        for i in first..steps {
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
            let pred = denoise.predict(&input, sched.timesteps()[i])?;
            let pred = match cfg {
                None => pred,
                Some(scale) => {
                    let halves = pred.chunk(2, 0)?;
                    let (uncond, cond) = (&halves[0], &halves[1]);
                    uncond.add(&cond.sub(uncond)?.mul_scalar(scale)?)?
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
}
