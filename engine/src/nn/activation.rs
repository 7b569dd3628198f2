//! Activations as modules, so they can sit in a `Sequential` between layers.

use super::module::Module;
use crate::{Result, Tensor};

/// The activation an `Mlp` puts between its layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Relu,
    Gelu,
    Silu,
    Tanh,
}

impl Activation {
    /// The activation as ONNX operators of opset 13+: SiLU as x·sigmoid(x), GELU (the exact,
    /// erf form) as x·(1 + erf(x/√2))/2.
    pub fn to_onnx(self, g: &mut crate::io::onnx::export::OnnxGraph, x: &str) -> Result<String> {
        Ok(match self {
            Activation::Relu => g.node("Relu", &[x], &[]),
            Activation::Tanh => g.node("Tanh", &[x], &[]),
            Activation::Silu => {
                let s = g.node("Sigmoid", &[x], &[]);
                g.node("Mul", &[x, &s], &[])
            }
            Activation::Gelu => {
                let sqrt2 = g.scalar("sqrt2", std::f32::consts::SQRT_2)?;
                let (one, half) = (g.scalar("one", 1.0)?, g.scalar("half", 0.5)?);
                let scaled = g.node("Div", &[x, &sqrt2], &[]);
                let erf = g.node("Erf", &[&scaled], &[]);
                let cdf = g.node("Add", &[&erf, &one], &[]);
                let xc = g.node("Mul", &[x, &cdf], &[]);
                g.node("Mul", &[&xc, &half], &[])
            }
        })
    }

    pub fn apply(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Activation::Relu => x.relu(),
            Activation::Gelu => x.gelu(),
            Activation::Silu => x.silu(),
            Activation::Tanh => x.tanh(),
        }
    }

    pub fn parse(name: &str) -> Option<Activation> {
        match name.to_ascii_lowercase().as_str() {
            "relu" => Some(Activation::Relu),
            "gelu" => Some(Activation::Gelu),
            "silu" | "swish" => Some(Activation::Silu),
            "tanh" => Some(Activation::Tanh),
            _ => None,
        }
    }

    /// The activation as a boxed module.
    pub fn module(self) -> Box<dyn Module> {
        match self {
            Activation::Relu => Box::new(ReLU::default()),
            Activation::Gelu => Box::new(GELU::default()),
            Activation::Silu => Box::new(SiLU::default()),
            Activation::Tanh => Box::new(Tanh::default()),
        }
    }
}

macro_rules! activation_module {
    ($name:ident, $kind:expr) => {
        /// A parameter-free activation module.
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            training: bool,
        }

        impl Default for $name {
            fn default() -> Self {
                $name { training: true }
            }
        }

        impl Module for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                $kind.apply(x)
            }
            super::module::training_field!();
            fn to_onnx(
                &self,
                g: &mut crate::io::onnx::export::OnnxGraph,
                _prefix: &str,
                x: &str,
            ) -> Result<String> {
                $kind.to_onnx(g, x)
            }
        }
    };
}

activation_module!(ReLU, Activation::Relu);
activation_module!(GELU, Activation::Gelu);
activation_module!(SiLU, Activation::Silu);
activation_module!(Tanh, Activation::Tanh);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_modules_apply_their_function() {
        let x = Tensor::from_vec(vec![-1f32, 0.5], &[2]).unwrap();
        assert_eq!(
            ReLU::default().forward(&x).unwrap().to_vec_f32().unwrap(),
            [0.0, 0.5]
        );
        let t = Tanh::default().forward(&x).unwrap().to_vec_f32().unwrap();
        assert!((t[0] - (-1f32).tanh()).abs() < 1e-6);
        assert_eq!(Activation::parse("SiLU"), Some(Activation::Silu));
    }
}
