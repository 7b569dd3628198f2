//! The denoisers' conditioning on time, as diffusers builds it: the timestep's sinusoidal
//! features (`get_timestep_embedding`) and the two-layer SiLU MLP over them
//! (`TimestepEmbedding`; also the MLP that SDXL's added conditioning and the MMDiTs' pooled
//! text go through).

use crate::nn::{Linear, Module};
use crate::{DType, Generator, Result, Tensor};

/// `linear_1` → SiLU → `linear_2`.
pub struct TimestepEmbedding {
    pub linear_1: Linear,
    pub linear_2: Linear,
    training: bool,
}

impl TimestepEmbedding {
    pub fn new(input: usize, width: usize, gen: &mut Generator) -> Result<TimestepEmbedding> {
        Ok(TimestepEmbedding {
            linear_1: Linear::new(input, width, true, gen)?,
            linear_2: Linear::new(width, width, true, gen)?,
            training: true,
        })
    }
}

impl Module for TimestepEmbedding {
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

/// The sinusoidal embedding of timesteps t [B] (max period 10000), [B, dim] in F32: frequencies
/// exp(-ln(10000) · i / (dim/2 - freq_shift)), sines then cosines (cosines first with
/// `flip_sin_to_cos`), a zero column for an odd `dim`.
pub fn sinusoidal(
    t: &Tensor,
    dim: usize,
    freq_shift: f64,
    flip_sin_to_cos: bool,
) -> Result<Tensor> {
    let half = dim / 2;
    let freqs = crate::ops::constant_table::cached(
        "sinusoidal frequencies",
        (half, freq_shift.to_bits()),
        t.device(),
        || {
            let freqs: Vec<f64> = (0..half)
                .map(|i| (-(10000f64.ln()) * i as f64 / (half as f64 - freq_shift)).exp())
                .collect();
            Tensor::from_f64s(&freqs, &[1, half], DType::F32)
        },
    )?;
    let args = t
        .to_dtype(DType::F32)?
        .reshape_to(&[t.numel(), 1])?
        .mul(&freqs)?;
    let (sin, cos) = (args.sin()?, args.cos()?);
    let mut emb = match flip_sin_to_cos {
        true => Tensor::cat(&[cos, sin], 1)?,
        false => Tensor::cat(&[sin, cos], 1)?,
    };
    if dim % 2 == 1 {
        emb = emb.pad(&[0, 1], crate::ops::rearrange::PadMode::Constant(0.0))?;
    }
    Ok(emb)
}
