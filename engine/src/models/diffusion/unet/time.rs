//! The UNet's conditioning on time: the timestep's sinusoidal features and MLP, and SDXL's
//! added conditioning (the pooled text and the six size numbers through `add_embedding`).

use super::UNetConfig;
use crate::nn::{Linear, Module};
use crate::{DType, Error, Result, Tensor};

/// The timestep's MLP (`time_embedding.linear_1`, `linear_2`).
pub(super) struct TimeEmbedding {
    pub(super) linear_1: Linear,
    pub(super) linear_2: Linear,
    pub(super) training: bool,
}

impl Module for TimeEmbedding {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.linear_2.forward(&self.linear_1.forward(x)?.silu()?)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("linear_1".into(), &self.linear_1),
            ("linear_2".into(), &self.linear_2),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.linear_1, &mut self.linear_2]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "TimestepEmbedding".into()
    }
}

/// SDXL's added conditioning for one batch.
pub struct AddedConditions {
    /// The second text encoder's pooled, projected output [B, P].
    pub text_embeds: Tensor,
    /// Original height and width, crop top and left, target height and width [B, 6].
    pub time_ids: Tensor,
}

/// The sinusoidal embedding of timesteps [B] (diffusers' `get_timestep_embedding`, max
/// period 10000), [B, dim], in F32.
pub(super) fn sinusoidal(t: &Tensor, dim: usize, config: &UNetConfig) -> Result<Tensor> {
    let half = dim / 2;
    let freqs: Vec<f64> = (0..half)
        .map(|i| (-(10000f64.ln()) * i as f64 / (half as f64 - config.freq_shift)).exp())
        .collect();
    let freqs = Tensor::from_f64s(&freqs, &[1, half], DType::F32)?.to_device(t.device())?;
    let args = t
        .to_dtype(DType::F32)?
        .reshape_to(&[t.numel(), 1])?
        .mul(&freqs)?;
    let (sin, cos) = (args.sin()?, args.cos()?);
    let mut emb = match config.flip_sin_to_cos {
        true => Tensor::cat(&[cos, sin], 1)?,
        false => Tensor::cat(&[sin, cos], 1)?,
    };
    if dim % 2 == 1 {
        emb = emb.pad(&[0, 1], crate::ops::rearrange::PadMode::Constant(0.0))?;
    }
    Ok(emb)
}

/// SDXL's MLP input: the pooled text [B, P] and the six size numbers [B, 6], each
/// embedded sinusoidally, side by side.
pub(super) fn added_features(
    config: &UNetConfig,
    added: Option<&AddedConditions>,
    b: usize,
    sample: &Tensor,
) -> Result<Tensor> {
    const WHAT: &str = "UNet2DConditionModel";
    let tt = config
        .text_time
        .expect("only text_time UNets have add_embedding");
    let Some(added) = added else {
        return Err(Error::invalid(
            WHAT,
            "this UNet (addition_embed_type text_time: SDXL) needs the pooled text embedding and the size numbers (text_embeds, time_ids)",
        ));
    };
    let p = tt.text_embeds_dim();
    if added.text_embeds.shape() != [b, p] {
        return Err(Error::layer_input(
            WHAT,
            format!("text_embeds [{b}, {p}]"),
            format!("{:?}", added.text_embeds.shape()),
        ));
    }
    if added.time_ids.shape() != [b, 6] {
        return Err(Error::layer_input(
            WHAT,
            format!("time_ids [{b}, 6]"),
            format!("{:?}", added.time_ids.shape()),
        ));
    }
    let ids = added
        .time_ids
        .to_device(sample.device())?
        .reshape_to(&[b * 6])?;
    let times =
        sinusoidal(&ids, tt.time_embed_dim, config)?.reshape_to(&[b, 6 * tt.time_embed_dim])?;
    let text = added
        .text_embeds
        .to_device(sample.device())?
        .to_dtype(DType::F32)?;
    Tensor::cat(&[text, times], 1)?.to_dtype(sample.dtype())
}
