//! Image to image's and inpainting's start: the image's latents noised part of the way, the
//! mask at the latents' size, and what the walk keeps (blended inpainting) or feeds the UNet
//! beside the latents (a 9-channel inpainting UNet).

use super::{StableDiffusion, TextToImage};
use crate::models::diffusion::scheduler::Scheduler;
use crate::{DType, Error, Generator, Result, Tensor};

impl StableDiffusion {
    /// Image to image's start: the images' latents (a draw of the VAE's distribution, scaled)
    /// noised to the step `strength` of the way from the end, and that step; with a mask, what
    /// the steps keep outside it (and at strength 1, pure noise inside it, as diffusers'
    /// inpainting starts).
    pub(super) fn image_start(
        &self,
        ask: &TextToImage,
        image: &Tensor,
        shape: &[usize; 4],
        sched: &mut dyn Scheduler,
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
        let run = self.steps_run(ask);
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
            false => Some(self.latents_of(image, given_draw.as_ref(), shape, &mut gen)?),
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
            let binary = self.binary_mask(mask)?;
            let masked = image
                .to_dtype(DType::F32)?
                .to_device(device)?
                .mul(&binary.neg()?.add_scalar(1.0)?)?;
            let masked =
                self.latents_of(&masked, ask.init_masked_draw.as_ref(), shape, &mut gen)?;
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
    pub(super) fn inpainting_unet(&self) -> bool {
        let c = self.vae.config.latent_channels;
        self.denoiser.in_channels() == 2 * c + 1
    }

    /// Images [N or 1, 3, H, W] in [-1, 1] as clean latents [N, C, h, w] (`encode_latents`,
    /// a single image repeated for the batch).
    fn latents_of(
        &self,
        images: &Tensor,
        draw: Option<&Tensor>,
        shape: &[usize; 4],
        gen: &mut Generator,
    ) -> Result<Tensor> {
        let clean = self.encode_latents(images, draw, gen)?;
        match clean.shape()[0] == shape[0] {
            true => Ok(clean),
            false => clean.expand(shape)?.contiguous(),
        }
    }

    /// A mask cut at 0.5 (diffusers' mask processor binarizes): 1 where to redraw, on the
    /// pipeline's device in F32.
    fn binary_mask(&self, mask: &Tensor) -> Result<Tensor> {
        mask.to_dtype(DType::F32)?
            .to_device(self.device())?
            .ge_scalar(0.5)?
            .to_dtype(DType::F32)
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
        let picked = self
            .binary_mask(mask)?
            .reshape_to(&[m, 1, h, s, w, s])?
            .narrow(3, 0, 1)?
            .narrow(5, 0, 1)?
            .reshape_to(&[m, 1, h, w])?;
        picked.expand(&[n, 1, h, w])?.contiguous()
    }
}

/// Where the walk starts, and for inpainting what it keeps.
pub(super) struct ImageStart {
    pub(super) latents: Tensor,
    /// The first step run.
    pub(super) first: usize,
    pub(super) keep: Option<Kept>,
    /// A 9-channel inpainting UNet's extra input: the latent mask and the masked image's
    /// latents [N, 1 + C, h, w].
    pub(super) condition: Option<Tensor>,
}

/// Inpainting's kept part: the image's clean latents, the noise they are renoised with, and
/// the latent mask (1: redrawn).
pub(super) struct Kept {
    pub(super) clean: Tensor,
    pub(super) noise: Tensor,
    pub(super) mask: Tensor,
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
