//! Diffusion models (issue 45, in progress): so far the samplers (`scheduler`), with diffusers'
//! semantics.

pub mod scheduler;
