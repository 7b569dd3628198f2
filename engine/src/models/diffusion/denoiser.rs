//! A pipeline's denoiser: a UNet (SD 1.x, 2.x, SDXL) or an MMDiT transformer (SD3, FLUX),
//! behind the one call the sampling loop makes on [B, C, H, W] latents.

use super::mmdit::flux::{image_ids, pack_latents, unpack_latents};
use super::mmdit::{FluxInputs, FluxTransformer, Sd3Transformer};
use super::prompt_encoder::Conditioning;
use super::{AddedConditions, UNet};
use crate::nn::Module;
use crate::{DType, Error, Result, Tensor};

/// Each model boxed: the three differ in size, and a pipeline holds one.
pub enum Denoiser {
    UNet(Box<UNet>),
    Sd3(Box<Sd3Transformer>),
    Flux(Box<FluxTransformer>),
}

impl Denoiser {
    pub fn module(&self) -> &dyn Module {
        match self {
            Denoiser::UNet(m) => m.as_ref(),
            Denoiser::Sd3(m) => m.as_ref(),
            Denoiser::Flux(m) => m.as_ref(),
        }
    }

    pub fn in_channels(&self) -> usize {
        match self {
            Denoiser::UNet(m) => m.config.in_channels,
            Denoiser::Sd3(m) => m.config.in_channels,
            // The VAE's channels, packed 2x2.
            Denoiser::Flux(m) => m.config.in_channels / 4,
        }
    }

    /// What each side of the latent must be a multiple of: the UNet's downscale, the
    /// transformer's patch (FLUX's 2x2 packing).
    pub fn latent_multiple(&self) -> usize {
        match self {
            Denoiser::UNet(m) => m.config.downscale(),
            Denoiser::Sd3(m) => m.config.patch_size,
            Denoiser::Flux(_) => 2,
        }
    }

    /// The latent side the model was trained at, where its config says (FLUX's pipeline
    /// defaults to 128).
    pub fn sample_size(&self) -> Option<usize> {
        match self {
            Denoiser::UNet(m) => m.sample_size,
            Denoiser::Sd3(m) => Some(m.config.sample_size),
            Denoiser::Flux(_) => Some(128),
        }
    }

    /// Whether its step gains from being captured as one CUDA graph. The UNets' convolutions
    /// run through cuDNN, whose calls a capture refuses; inside a graph they fall back to
    /// im2col, which costs more than the launches save (SD 1.5 at batch 4 on an H100: 31.4 ms
    /// captured against 24.6 op by op), so UNets run op by op until cuDNN's work is captured.
    /// The MMDiTs' products and attention capture whole (FLUX-width blocks: 2.24 ms against
    /// 2.52).
    pub fn gains_from_capture(&self) -> bool {
        !matches!(self, Denoiser::UNet(_))
    }

    /// Whether the model takes the guidance scale as an input (FLUX-dev's distilled
    /// guidance) instead of a second, unconditional pass.
    pub fn embeds_guidance(&self) -> bool {
        matches!(self, Denoiser::Flux(m) if m.config.guidance_embeds)
    }

    /// Whether the model takes a guidance scale at all (classifier-free or embedded): FLUX
    /// without guidance embedding (schnell) takes none.
    pub fn guided(&self) -> bool {
        !matches!(self, Denoiser::Flux(m) if !m.config.guidance_embeds)
    }

    /// The model's prediction for latents at timesteps under the prompts' conditioning (and
    /// SDXL's added size conditioning, FLUX-dev's guidance scale [1], F32 on the device).
    pub fn predict(
        &self,
        latents: &Tensor,
        timesteps: &Tensor,
        cond: &Conditioning,
        added: Option<&AddedConditions>,
        guidance: &Tensor,
    ) -> Result<Tensor> {
        match self {
            Denoiser::UNet(m) => m.predict_with(latents, timesteps, Some(&cond.states), added),
            Denoiser::Sd3(m) => {
                let pooled = cond.pooled.as_ref().ok_or_else(|| {
                    Error::invalid("generate", "SD3's transformer needs the pooled text")
                })?;
                m.predict(latents, timesteps, &cond.states, pooled)
            }
            Denoiser::Flux(m) => {
                let pooled = cond.pooled.as_ref().ok_or_else(|| {
                    Error::invalid("generate", "FLUX's transformer needs the pooled text")
                })?;
                let (h, w) = (latents.shape()[2], latents.shape()[3]);
                // diffusers hands FLUX σ = t / 1000 (in F32) and the model scales it back.
                let sigmas = timesteps.to_dtype(DType::F32)?.mul_scalar(1e-3)?;
                let ids = image_ids(h, w);
                let inputs = FluxInputs {
                    context: &cond.states,
                    pooled,
                    timesteps: &sigmas,
                    guidance: m.config.guidance_embeds.then_some(guidance),
                    image_ids: &ids,
                };
                let out = m.predict(&pack_latents(latents)?, &inputs)?;
                unpack_latents(&out, h, w)
            }
        }
    }
}
