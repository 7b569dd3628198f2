//! diffusers' `FeedForward` (`net.0.proj` in, `net.2` out) with the two activations its
//! denoisers use: GEGLU (the UNets' transformer blocks: the projection gives 2 × inner, value ·
//! GELU(gate)) and tanh-approximated GELU (`gelu-approximate`: the MMDiTs).

use crate::nn::{Linear, Module};
use crate::{Generator, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedForwardActivation {
    Geglu,
    GeluTanh,
}

pub struct FeedForward {
    proj: Linear,
    out: Linear,
    activation: FeedForwardActivation,
    training: bool,
}

impl FeedForward {
    /// dim → `inner` → dim.
    pub fn new(
        dim: usize,
        inner: usize,
        activation: FeedForwardActivation,
        gen: &mut Generator,
    ) -> Result<FeedForward> {
        let widen = match activation {
            FeedForwardActivation::Geglu => 2,
            FeedForwardActivation::GeluTanh => 1,
        };
        Ok(FeedForward {
            proj: Linear::new(dim, widen * inner, true, gen)?,
            out: Linear::new(inner, dim, true, gen)?,
            activation,
            training: true,
        })
    }
}

impl Module for FeedForward {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.proj.forward(x)?;
        let h = match self.activation {
            FeedForwardActivation::Geglu => {
                let halves = h.chunk(2, -1)?;
                halves[0].mul(&halves[1].gelu()?)?
            }
            FeedForwardActivation::GeluTanh => h.gelu_tanh()?,
        };
        self.out.forward(&h)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("net.0.proj".into(), &self.proj),
            ("net.2".into(), &self.out),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.proj, &mut self.out]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        match self.activation {
            FeedForwardActivation::Geglu => "FeedForward(GEGLU)".into(),
            FeedForwardActivation::GeluTanh => "FeedForward(GELU tanh)".into(),
        }
    }
}
