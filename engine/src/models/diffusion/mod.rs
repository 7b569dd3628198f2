//! Diffusion models (issue 45, in progress), with diffusers' names and semantics: the samplers
//! (`scheduler`), the VAE (`vae`), the UNets (`unet`, with `transformer2d` for
//! cross-attention), the convolutional blocks they share (`blocks`), and Stable Diffusion's
//! text-to-image pipeline (`pipeline`).

pub mod blocks;
pub mod denoise_step;
pub mod denoiser;
pub mod feed_forward;
pub mod lora;
pub mod mmdit;
pub mod pipeline;
pub mod prompt_encoder;
pub mod scheduler;
pub mod textual_inversion;
pub mod timestep;
pub mod transformer2d;
pub mod unet;
pub mod vae;
mod vae_tiles;

pub use pipeline::{StableDiffusion, TextToImage};

use crate::{Error, Result, Tensor};
use std::collections::BTreeMap;

/// Refuses block widths that a GroupNorm of `groups` groups cannot split.
pub(crate) fn check_groups(
    f: &crate::models::hf_config::Fields,
    channels: &[usize],
    groups: usize,
) -> Result<()> {
    match channels.iter().find(|c| !c.is_multiple_of(groups)) {
        Some(c) => Err(f.error(format!(
            "{c} channels do not split into norm_num_groups {groups}"
        ))),
        None => Ok(()),
    }
}

/// Refuses a config that describes a model of far more values than the weights it is loaded
/// from, before anything is allocated: `at_least` is a lower bound of the config's parameter
/// count (its largest products), so a hostile size is named instead of allocated.
pub(crate) fn check_config_against_weights(
    what: &'static str,
    at_least: f64,
    weights: &BTreeMap<String, Tensor>,
) -> Result<()> {
    let held: usize = weights.values().map(Tensor::numel).sum();
    if at_least > 2.0 * held as f64 + 1e6 {
        return Err(Error::format(
            what,
            format!(
                "the config describes at least {at_least:.3e} parameters but the weights hold {held}: \
                 not the model they were saved from"
            ),
        ));
    }
    Ok(())
}
pub use unet::{AddedConditions, TextTime, UNet, UNetConfig};
pub use vae::{AutoencoderKl, LatentDistribution, VaeConfig};
