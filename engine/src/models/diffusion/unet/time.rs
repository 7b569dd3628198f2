//! SDXL's added conditioning of the UNet: the pooled text and the six size numbers, embedded
//! for `add_embedding` (the timestep itself goes through `diffusion::timestep`).

use super::UNetConfig;
use crate::{DType, Error, Result, Tensor};

/// SDXL's added conditioning for one batch.
pub struct AddedConditions {
    /// The second text encoder's pooled, projected output [B, P].
    pub text_embeds: Tensor,
    /// Original height and width, crop top and left, target height and width [B, 6].
    pub time_ids: Tensor,
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
    let times = super::super::timestep::sinusoidal(
        &ids,
        tt.time_embed_dim,
        config.freq_shift,
        config.flip_sin_to_cos,
    )?
    .reshape_to(&[b, 6 * tt.time_embed_dim])?;
    let text = added
        .text_embeds
        .to_device(sample.device())?
        .to_dtype(DType::F32)?;
    Tensor::cat(&[text, times], 1)?.to_dtype(sample.dtype())
}
