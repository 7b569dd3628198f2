//! ultralytics' `Conv`: Conv2d (no bias) -> BatchNorm2d (eps 1e-3, momentum 0.03) -> SiLU. In a
//! fused network the batch norm is folded into the convolution, which then has a bias; the
//! names are ultralytics' in both forms (`conv.weight`, `bn.*`; fused: `conv.weight`,
//! `conv.bias`).

use super::block::lower_child;
use super::init::Init;
use crate::backend::spec::UnaryOp;
use crate::io::onnx::export::GraphBuilder;
use crate::nn::{Activation, BatchNorm2d, Conv2d, Module};
use crate::{Conv2dOptions, Result, Tensor};

/// ultralytics' batch-norm settings (`initialize_weights`).
pub const BN_EPS: f64 = 1e-3;
pub const BN_MOMENTUM: f64 = 0.03;

/// How a `ConvBn` is built.
#[derive(Clone, Copy, Debug)]
pub struct ConvSpec {
    pub c1: usize,
    pub c2: usize,
    pub k: usize,
    pub s: usize,
    pub g: usize,
    pub act: bool,
}

impl ConvSpec {
    /// `Conv(c1, c2, k, s)` with groups 1 and SiLU.
    pub fn new(c1: usize, c2: usize, k: usize, s: usize) -> Self {
        ConvSpec {
            c1,
            c2,
            k,
            s,
            g: 1,
            act: true,
        }
    }
    pub fn groups(self, g: usize) -> Self {
        ConvSpec { g, ..self }
    }
    pub fn linear(self) -> Self {
        ConvSpec { act: false, ..self }
    }

    /// The values its weights hold: the kernel, and a bias (fused) or the batch norm's weight,
    /// bias, running mean and variance and its step count.
    pub fn values(&self, fused: bool) -> usize {
        let kernel = self
            .c2
            .saturating_mul(self.c1 / self.g.max(1))
            .saturating_mul(self.k.saturating_mul(self.k));
        let after = if fused { self.c2 } else { 4 * self.c2 + 1 };
        kernel.saturating_add(after)
    }
}

pub struct ConvBn {
    pub conv: Conv2d,
    /// `None` once folded into `conv` (the fused network).
    pub bn: Option<BatchNorm2d>,
    pub act: bool,
    training: bool,
}

impl ConvBn {
    pub fn new(spec: ConvSpec, fused: bool, init: &mut Init<'_>) -> Result<Self> {
        // autopad: k // 2 keeps the size at stride 1.
        let options = Conv2dOptions {
            stride: (spec.s, spec.s),
            padding: (spec.k / 2, spec.k / 2),
            dilation: (1, 1),
            groups: spec.g,
        };
        let gen = init.claim(spec.values(fused), || {
            format!(
                "a {}x{} convolution from {} to {} channels",
                spec.k, spec.k, spec.c1, spec.c2
            )
        })?;
        let conv = Conv2d::new(spec.c1, spec.c2, (spec.k, spec.k), options, fused, gen)?;
        let bn = if fused {
            None
        } else {
            let mut bn = BatchNorm2d::new(spec.c2)?;
            bn.eps = BN_EPS;
            bn.momentum = Some(BN_MOMENTUM);
            Some(bn)
        };
        Ok(ConvBn {
            conv,
            bn,
            act: spec.act,
            training: true,
        })
    }

    /// Depth-wise `DWConv(c1, c2, k)`: groups = gcd(c1, c2).
    pub fn depthwise(
        c1: usize,
        c2: usize,
        k: usize,
        fused: bool,
        init: &mut Init<'_>,
    ) -> Result<Self> {
        Self::new(ConvSpec::new(c1, c2, k, 1).groups(gcd(c1, c2)), fused, init)
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Module for ConvBn {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let act = self.act.then_some(UnaryOp::Silu);
        match &self.bn {
            // Fused: the folded bias and SiLU in one pass after the convolution.
            None => self.conv.forward_act(x, act),
            // Training form: the norm and SiLU as one fused node after the convolution.
            Some(bn) => bn.forward_act(&self.conv.forward(x)?, act),
        }
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![("conv".into(), &self.conv)];
        if let Some(bn) = &self.bn {
            c.push(("bn".into(), bn));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.conv];
        if let Some(bn) = &mut self.bn {
            c.push(bn);
        }
        c
    }

    crate::nn::training_field!();

    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        let mut y = lower_child(g, prefix, "conv", &self.conv, x)?;
        if let Some(bn) = &self.bn {
            y = lower_child(g, prefix, "bn", bn, &y)?;
        }
        match self.act {
            true => Activation::Silu.to_onnx(g, &y),
            false => Ok(y),
        }
    }
}
