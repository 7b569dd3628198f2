//! A pipeline's denoiser: a UNet (SD 1.x, 2.x, SDXL) or an MMDiT transformer (SD3), behind
//! the one call the sampling loop makes.

use super::mmdit::Sd3Transformer;
use super::prompt_encoder::Conditioning;
use super::{AddedConditions, UNet};
use crate::nn::Module;
use crate::{Error, Result, Tensor};

pub enum Denoiser {
    UNet(UNet),
    Sd3(Sd3Transformer),
}

impl Denoiser {
    pub fn module(&self) -> &dyn Module {
        match self {
            Denoiser::UNet(m) => m,
            Denoiser::Sd3(m) => m,
        }
    }

    pub fn in_channels(&self) -> usize {
        match self {
            Denoiser::UNet(m) => m.config.in_channels,
            Denoiser::Sd3(m) => m.config.in_channels,
        }
    }

    /// What each side of the latent must be a multiple of: the UNet's downscale, the
    /// transformer's patch.
    pub fn latent_multiple(&self) -> usize {
        match self {
            Denoiser::UNet(m) => m.config.downscale(),
            Denoiser::Sd3(m) => m.config.patch_size,
        }
    }

    /// The latent side the model was trained at, where its config says.
    pub fn sample_size(&self) -> Option<usize> {
        match self {
            Denoiser::UNet(m) => m.sample_size,
            Denoiser::Sd3(m) => Some(m.config.sample_size),
        }
    }

    /// The model's prediction for latents at timesteps under the prompts' conditioning (and
    /// SDXL's added size conditioning).
    pub fn predict(
        &self,
        latents: &Tensor,
        timesteps: &Tensor,
        cond: &Conditioning,
        added: Option<&AddedConditions>,
    ) -> Result<Tensor> {
        match self {
            Denoiser::UNet(m) => m.predict_with(latents, timesteps, Some(&cond.states), added),
            Denoiser::Sd3(m) => {
                let pooled = cond.pooled.as_ref().ok_or_else(|| {
                    Error::invalid("generate", "SD3's transformer needs the pooled text")
                })?;
                m.predict(latents, timesteps, &cond.states, pooled)
            }
        }
    }
}
