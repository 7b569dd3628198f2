//! What the MMDiTs share around their blocks: the conditioning vector (diffusers'
//! `CombinedTimestepTextProjEmbeddings`, and FLUX-dev's `…GuidanceTextProjEmbeddings`: the
//! timestep's sin-cos MLP, the guidance value's, and the pooled text's MLP, summed), the text
//! tokens' projection (`context_embedder`), the input checks, and loading a folder.

use crate::io::pretrained::{load_weights_named, read_config};
use crate::models::diffusion::timestep::{sinusoidal, TimestepEmbedding};
use crate::models::hf_config::Fields;
use crate::nn::{Linear, Module};
use crate::{DType, Error, Generator, Result, Tensor};
use std::path::Path;

pub struct Conditioning {
    what: &'static str,
    timestep_embedder: TimestepEmbedding,
    guidance_embedder: Option<TimestepEmbedding>,
    text_embedder: TimestepEmbedding,
    context_embedder: Linear,
}

impl Conditioning {
    /// Blocks `dim` wide, text states `joint` wide, pooled text `pooled` wide; `guidance`:
    /// FLUX-dev's guidance embedding.
    pub fn new(
        what: &'static str,
        dim: usize,
        joint: usize,
        pooled: usize,
        guidance: bool,
        gen: &mut Generator,
    ) -> Result<Conditioning> {
        Ok(Conditioning {
            what,
            timestep_embedder: TimestepEmbedding::new(256, dim, gen)?,
            guidance_embedder: guidance
                .then(|| TimestepEmbedding::new(256, dim, gen))
                .transpose()?,
            text_embedder: TimestepEmbedding::new(pooled, dim, gen)?,
            context_embedder: Linear::new(joint, dim, true, gen)?,
        })
    }

    /// The conditioning vector [B, dim] in `dtype` and the projected text tokens
    /// [B, S, dim], for timesteps (and guidance values) already in the model's units, one per
    /// sample; the text states [B, S, joint] and pooled text [B, pooled] are checked first.
    pub fn embed(
        &self,
        timesteps: &Tensor,
        guidance: Option<&Tensor>,
        context: &Tensor,
        pooled: &Tensor,
        dtype: DType,
    ) -> Result<(Tensor, Tensor)> {
        let b = timesteps.shape()[0];
        let joint = self.context_embedder.in_features();
        if context.rank() != 3 || context.shape()[0] != b || context.shape()[2] != joint {
            return Err(Error::layer_input(
                self.what,
                format!("text states [{b}, S, {joint}]"),
                format!("{:?}", context.shape()),
            ));
        }
        let p = self.text_embedder.linear_1.in_features();
        if pooled.shape() != [b, p] {
            return Err(Error::layer_input(
                self.what,
                format!("pooled text [{b}, {p}]"),
                format!("{:?}", pooled.shape()),
            ));
        }
        let embed = |mlp: &TimestepEmbedding, t: &Tensor| -> Result<Tensor> {
            mlp.forward(&sinusoidal(t, 256, 0.0, true)?.to_dtype(pooled.dtype())?)
        };
        let mut temb = embed(&self.timestep_embedder, timesteps)?;
        match (&self.guidance_embedder, guidance) {
            (Some(mlp), Some(g)) => temb = temb.add(&embed(mlp, g)?)?,
            (Some(_), None) => {
                return Err(Error::invalid(
                    self.what,
                    "this model (guidance_embeds) needs a guidance value",
                ))
            }
            (None, _) => {}
        }
        let temb = temb
            .add(&self.text_embedder.forward(pooled)?)?
            .to_dtype(dtype)?;
        let context = self.context_embedder.forward(&context.to_dtype(dtype)?)?;
        Ok((temb, context))
    }

    /// (name, module) under diffusers' names.
    pub fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![(
            "time_text_embed.timestep_embedder".into(),
            &self.timestep_embedder,
        )];
        if let Some(g) = &self.guidance_embedder {
            c.push(("time_text_embed.guidance_embedder".into(), g));
        }
        c.push(("time_text_embed.text_embedder".into(), &self.text_embedder));
        c.push(("context_embedder".into(), &self.context_embedder));
        c
    }

    pub fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.timestep_embedder];
        if let Some(g) = &mut self.guidance_embedder {
            c.push(g);
        }
        c.push(&mut self.text_embedder);
        c.push(&mut self.context_embedder);
        c
    }
}

/// Values given for the batch, [1] or [b], as [b] on `like`'s device.
pub fn per_sample(
    t: &Tensor,
    b: usize,
    what: &'static str,
    name: &str,
    like: &Tensor,
) -> Result<Tensor> {
    let t = match t.numel() {
        1 => t.reshape_to(&[1])?.expand(&[b])?.contiguous()?,
        n if n == b => t.reshape_to(&[b])?,
        n => {
            return Err(Error::layer_input(
                what,
                format!("1 or {b} {name}"),
                format!("{n}"),
            ))
        }
    };
    t.to_device(like.device())
}

/// A diffusers model folder (`transformer/` of a pipeline): config.json (its `_class_name`
/// `what`, or none) read by `read`, and diffusion_pytorch_model safetensors (sharded or not),
/// every tensor required. `at_least` bounds the config's parameter count from below: checked
/// against the weights before `build` allocates anything.
pub fn from_folder<C, M: Module>(
    dir: &Path,
    what: &'static str,
    read: impl FnOnce(&Fields) -> Result<C>,
    at_least: impl FnOnce(&C) -> f64,
    build: impl FnOnce(C) -> Result<M>,
) -> Result<M> {
    let json = read_config(dir)?;
    let f = Fields::new(&json, what);
    let in_dir = |e: Error| Error::format(what, format!("{}: {e}", dir.display()));
    match f.string("_class_name") {
        Some(c) if c != what => return Err(in_dir(f.error(format!("{c} is not a {what}")))),
        _ => {}
    }
    let config = read(&f).map_err(in_dir)?;
    let weights = load_weights_named(dir, "diffusion_pytorch_model")?;
    super::super::check_config_against_weights(what, at_least(&config), &weights)?;
    let model = build(config)?;
    model.load_state_dict(&weights, true).map_err(in_dir)?;
    Ok(model)
}
