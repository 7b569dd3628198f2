//! adaLN: a linear map of SiLU(conditioning) gives, per sample, the shifts, scales and gates
//! that modulate a block's parameter-free layer norms (eps 1e-6).

use crate::nn::{Linear, Module};
use crate::{Generator, Result, Tensor};

/// Which of diffusers' adaptive norms, by how many vectors the linear gives and their order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdaNormKind {
    /// `AdaLayerNormZero`: shift, scale, gate for attention; shift, scale, gate for the MLP.
    Zero,
    /// `SD35AdaLayerNormZeroX`: `Zero`'s six, then shift, scale, gate of the second attention.
    ZeroX,
    /// `AdaLayerNormContinuous`: scale, then shift (note the order), no gates.
    Continuous,
    /// `AdaLayerNormZeroSingle` (FLUX's single blocks): shift, scale, gate.
    ZeroSingle,
}

impl AdaNormKind {
    fn vectors(self) -> usize {
        match self {
            AdaNormKind::Zero => 6,
            AdaNormKind::ZeroX => 9,
            AdaNormKind::Continuous => 2,
            AdaNormKind::ZeroSingle => 3,
        }
    }
}

pub struct AdaNorm {
    linear: Linear,
    pub kind: AdaNormKind,
    training: bool,
}

impl AdaNorm {
    pub fn new(dim: usize, kind: AdaNormKind, gen: &mut Generator) -> Result<AdaNorm> {
        Ok(AdaNorm {
            linear: Linear::new(dim, kind.vectors() * dim, true, gen)?,
            kind,
            training: true,
        })
    }

    /// The vectors for conditioning [B, dim], each [B, 1, dim] to broadcast over tokens, in
    /// diffusers' order for the kind.
    pub fn vectors(&self, emb: &Tensor) -> Result<Vec<Tensor>> {
        self.forward(emb)?
            .chunk(self.kind.vectors(), 1)?
            .iter()
            .map(|v| v.unsqueeze(1))
            .collect()
    }
}

impl Module for AdaNorm {
    /// linear(SiLU(conditioning)): the vectors side by side.
    fn forward(&self, emb: &Tensor) -> Result<Tensor> {
        self.linear.forward(&emb.silu()?)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("linear".into(), &self.linear)]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.linear]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        match self.kind {
            AdaNormKind::Zero => "AdaLayerNormZero".into(),
            AdaNormKind::ZeroX => "SD35AdaLayerNormZeroX".into(),
            AdaNormKind::Continuous => "AdaLayerNormContinuous".into(),
            AdaNormKind::ZeroSingle => "AdaLayerNormZeroSingle".into(),
        }
    }
}

/// The blocks' layer norm: no weight or bias, eps 1e-6.
pub fn norm(x: &Tensor) -> Result<Tensor> {
    x.layer_norm(None, None, 1e-6)
}

/// normed · (1 + scale) + shift.
pub fn modulate(normed: &Tensor, shift: &Tensor, scale: &Tensor) -> Result<Tensor> {
    normed.mul(&scale.add_scalar(1.0)?)?.add(shift)
}
