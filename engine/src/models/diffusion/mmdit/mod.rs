//! The MMDiT denoisers (Stable Diffusion 3's `SD3Transformer2DModel`, FLUX.1's
//! `FluxTransformer2DModel`): the latent cut into
//! patches and the text states run as two token streams through joint transformer blocks
//! that attend over both at once, each stream with its own weights and each block's norms
//! modulated by the timestep and pooled text (adaLN-Zero).
//!
//! - `modulation`: the adaptive layer norms (`AdaLayerNormZero`, SD3.5's `…ZeroX`,
//!   `AdaLayerNormContinuous`).
//! - `joint_attention`: one attention over the streams side by side, with the q/k RMS norms
//!   of SD3.5.
//! - `joint_block`: `JointTransformerBlock`.
//! - `patch_embed`: the patches and SD3's fixed 2-D sin-cos position table, cropped to the
//!   image.
//! - `sd3`: SD3's model and its config.
//! - `flux`: FLUX's model (double- then single-stream blocks, rotary positions), its config
//!   and the latent packing.

mod conditioning;
pub mod flux;
mod joint_attention;
mod joint_block;
mod modulation;
mod patch_embed;
mod sd3;

pub use flux::{FluxConfig, FluxInputs, FluxTransformer};
pub use joint_attention::Rotary;
pub use patch_embed::sincos_position_table;
pub use sd3::{Sd3Config, Sd3Transformer};
