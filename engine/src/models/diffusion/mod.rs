//! Diffusion models (issue 45, in progress), with diffusers' names and semantics: the samplers
//! (`scheduler`), the VAE (`vae`), and the convolutional blocks they and the UNets share
//! (`blocks`).

pub mod blocks;
pub mod scheduler;
pub mod vae;

pub use vae::{AutoencoderKl, LatentDistribution, VaeConfig};
