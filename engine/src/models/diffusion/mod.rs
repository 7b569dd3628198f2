//! Diffusion models (issue 45, in progress), with diffusers' names and semantics: the samplers
//! (`scheduler`), the VAE (`vae`), the UNets (`unet`, with `transformer2d` for
//! cross-attention), the convolutional blocks they share (`blocks`), and Stable Diffusion's
//! text-to-image pipeline (`pipeline`).

pub mod blocks;
pub mod pipeline;
pub mod scheduler;
pub mod transformer2d;
pub mod unet;
pub mod vae;

pub use pipeline::{StableDiffusion, TextToImage};
pub use unet::{UNet, UNetConfig};
pub use vae::{AutoencoderKl, LatentDistribution, VaeConfig};
