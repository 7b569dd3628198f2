//! Diffusion models (issue 45, in progress), with diffusers' names and semantics: the samplers
//! (`scheduler`), the VAE (`vae`), the UNets (`unet`, with `transformer2d` for
//! cross-attention), and the convolutional blocks they share (`blocks`).

pub mod blocks;
pub mod scheduler;
pub mod transformer2d;
pub mod unet;
pub mod vae;

pub use unet::{UNet, UNetConfig};
pub use vae::{AutoencoderKl, LatentDistribution, VaeConfig};
