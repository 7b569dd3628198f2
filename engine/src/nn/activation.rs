//! Activations: the functions (`Activation`), and as modules (`ActivationLayer`), so they can
//! sit in a `Sequential` between layers. One table of names: `parse` reads what scripts and
//! configs write, `class_name` prints PyTorch's class.

use super::module::Module;
use crate::backend::spec::unary::{QUICK_GELU_K, SELU_ALPHA, SELU_SCALE};
use crate::io::onnx::export::Attr;
use crate::{Result, Tensor};

/// An elementwise activation, with its parameters where torch's has some.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    Relu,
    /// The exact (erf) GELU.
    Gelu,
    /// GELU's tanh approximation (PyTorch's `approximate="tanh"`, GPT-2's `gelu_new`).
    GeluTanh,
    Silu,
    Tanh,
    Sigmoid,
    Softplus,
    Mish,
    /// x·sigmoid(1.702·x), OpenAI CLIP's approximation (transformers' `quick_gelu`).
    QuickGelu,
    /// nn.LeakyReLU(negative_slope).
    LeakyRelu(f64),
    /// nn.ELU(alpha).
    Elu(f64),
    Selu,
    /// nn.CELU(alpha).
    Celu(f64),
    /// nn.Hardtanh(min_val, max_val).
    Hardtanh(f64, f64),
    Relu6,
    Hardsigmoid,
    Hardswish,
    Softsign,
    LogSigmoid,
}

impl Activation {
    /// Every activation (with torch's default parameters), for help texts and tests.
    pub const ALL: [Activation; 19] = [
        Activation::Relu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
        Activation::Tanh,
        Activation::Sigmoid,
        Activation::Softplus,
        Activation::Mish,
        Activation::QuickGelu,
        Activation::LeakyRelu(0.01),
        Activation::Elu(1.0),
        Activation::Selu,
        Activation::Celu(1.0),
        Activation::Hardtanh(-1.0, 1.0),
        Activation::Relu6,
        Activation::Hardsigmoid,
        Activation::Hardswish,
        Activation::Softsign,
        Activation::LogSigmoid,
    ];

    /// The activation as ONNX operators of opset 13+: SiLU as x·sigmoid(x), GELU (the exact,
    /// erf form) as x·(1 + erf(x/√2))/2, its tanh form and Mish from their formulas.
    pub fn to_onnx(self, g: &mut crate::io::onnx::export::GraphBuilder, x: &str) -> Result<String> {
        Ok(match self {
            Activation::Relu => g.node("Relu", &[x], &[]),
            Activation::Tanh => g.node("Tanh", &[x], &[]),
            Activation::Sigmoid => g.node("Sigmoid", &[x], &[]),
            Activation::Softplus => g.node("Softplus", &[x], &[]),
            Activation::Silu => {
                let s = g.node("Sigmoid", &[x], &[]);
                g.node("Mul", &[x, &s], &[])
            }
            Activation::QuickGelu => {
                let k = g.scalar("quick_gelu_k", QUICK_GELU_K as f32)?;
                let kx = g.node("Mul", &[x, &k], &[]);
                let s = g.node("Sigmoid", &[&kx], &[]);
                g.node("Mul", &[x, &s], &[])
            }
            Activation::Mish => {
                let sp = g.node("Softplus", &[x], &[]);
                let t = g.node("Tanh", &[&sp], &[]);
                g.node("Mul", &[x, &t], &[])
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
            Activation::LeakyRelu(slope) => {
                g.node("LeakyRelu", &[x], &[("alpha", Attr::Float(slope as f32))])
            }
            Activation::Elu(alpha) => g.node("Elu", &[x], &[("alpha", Attr::Float(alpha as f32))]),
            Activation::Selu => g.node(
                "Selu",
                &[x],
                &[
                    ("alpha", Attr::Float(SELU_ALPHA as f32)),
                    ("gamma", Attr::Float(SELU_SCALE as f32)),
                ],
            ),
            Activation::Celu(alpha) => {
                g.node("Celu", &[x], &[("alpha", Attr::Float(alpha as f32))])
            }
            Activation::Hardtanh(lo, hi) => {
                let (lo, hi) = (
                    g.scalar("hardtanh_min", lo as f32)?,
                    g.scalar("hardtanh_max", hi as f32)?,
                );
                g.node("Clip", &[x, &lo, &hi], &[])
            }
            Activation::Relu6 => {
                let (lo, hi) = (g.scalar("zero", 0.0)?, g.scalar("six", 6.0)?);
                g.node("Clip", &[x, &lo, &hi], &[])
            }
            // ONNX's HardSigmoid defaults to alpha 0.2; torch's is x/6 + 1/2.
            Activation::Hardsigmoid => g.node(
                "HardSigmoid",
                &[x],
                &[
                    ("alpha", Attr::Float(1.0 / 6.0)),
                    ("beta", Attr::Float(0.5)),
                ],
            ),
            Activation::Hardswish => g.node("HardSwish", &[x], &[]),
            Activation::Softsign => g.node("Softsign", &[x], &[]),
            Activation::LogSigmoid => {
                let neg = g.node("Neg", &[x], &[]);
                let sp = g.node("Softplus", &[&neg], &[]);
                g.node("Neg", &[&sp], &[])
            }
            Activation::GeluTanh => {
                // x·(1 + tanh(√(2/π)·(x + 0.044715 x³)))/2
                let (one, half) = (g.scalar("one", 1.0)?, g.scalar("half", 0.5)?);
                let k = g.scalar("gelu_k", (2.0 / std::f32::consts::PI).sqrt())?;
                let c = g.scalar("gelu_c", 0.044715)?;
                let x2 = g.node("Mul", &[x, x], &[]);
                let x3 = g.node("Mul", &[&x2, x], &[]);
                let cx3 = g.node("Mul", &[&x3, &c], &[]);
                let inner = g.node("Add", &[x, &cx3], &[]);
                let scaled = g.node("Mul", &[&inner, &k], &[]);
                let t = g.node("Tanh", &[&scaled], &[]);
                let cdf = g.node("Add", &[&t, &one], &[]);
                let xc = g.node("Mul", &[x, &cdf], &[]);
                g.node("Mul", &[&xc, &half], &[])
            }
        })
    }

    pub fn apply(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Activation::Relu => x.relu(),
            Activation::Gelu => x.gelu(),
            Activation::GeluTanh => x.gelu_tanh(),
            Activation::Silu => x.silu(),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => x.sigmoid(),
            Activation::Softplus => x.softplus(),
            Activation::Mish => x.mish(),
            Activation::QuickGelu => x.quick_gelu(),
            Activation::LeakyRelu(slope) => x.leaky_relu(slope),
            Activation::Elu(alpha) => x.elu(alpha),
            Activation::Selu => x.selu(),
            Activation::Celu(alpha) => x.celu(alpha),
            Activation::Hardtanh(lo, hi) => x.hardtanh(lo, hi),
            Activation::Relu6 => x.relu6(),
            Activation::Hardsigmoid => x.hardsigmoid(),
            Activation::Hardswish => x.hardswish(),
            Activation::Softsign => x.softsign(),
            Activation::LogSigmoid => x.log_sigmoid(),
        }
    }

    /// The names scripts and configs use (any case): PyTorch's function names, and the
    /// Hugging Face spellings of the same functions (`swish`, `gelu_new`, `gelu_pytorch_tanh`).
    pub fn parse(name: &str) -> Option<Activation> {
        Some(match name.to_ascii_lowercase().as_str() {
            "relu" => Activation::Relu,
            "gelu" => Activation::Gelu,
            "gelu_tanh" | "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
            "silu" | "swish" => Activation::Silu,
            "tanh" => Activation::Tanh,
            "sigmoid" => Activation::Sigmoid,
            "softplus" => Activation::Softplus,
            "mish" => Activation::Mish,
            "quick_gelu" => Activation::QuickGelu,
            "leaky_relu" => Activation::LeakyRelu(0.01),
            "elu" => Activation::Elu(1.0),
            "selu" => Activation::Selu,
            "celu" => Activation::Celu(1.0),
            "hardtanh" => Activation::Hardtanh(-1.0, 1.0),
            "relu6" => Activation::Relu6,
            "hardsigmoid" => Activation::Hardsigmoid,
            "hardswish" | "hard_swish" => Activation::Hardswish,
            "softsign" => Activation::Softsign,
            "log_sigmoid" | "logsigmoid" => Activation::LogSigmoid,
            _ => return None,
        })
    }

    /// The first name `parse` reads for it.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Silu => "silu",
            Activation::Tanh => "tanh",
            Activation::Sigmoid => "sigmoid",
            Activation::Softplus => "softplus",
            Activation::Mish => "mish",
            Activation::QuickGelu => "quick_gelu",
            Activation::LeakyRelu(_) => "leaky_relu",
            Activation::Elu(_) => "elu",
            Activation::Selu => "selu",
            Activation::Celu(_) => "celu",
            Activation::Hardtanh(..) => "hardtanh",
            Activation::Relu6 => "relu6",
            Activation::Hardsigmoid => "hardsigmoid",
            Activation::Hardswish => "hardswish",
            Activation::Softsign => "softsign",
            Activation::LogSigmoid => "log_sigmoid",
        }
    }

    /// The name transformers' `ACT2FN` reads for it in a config's `hidden_act`.
    pub fn hf_name(self) -> &'static str {
        match self {
            Activation::GeluTanh => "gelu_pytorch_tanh",
            other => other.name(),
        }
    }

    /// PyTorch's module for it, as `print(model)` shows it.
    pub fn class_name(self) -> String {
        let name = match self {
            Activation::Relu => "ReLU",
            Activation::Gelu => "GELU",
            Activation::GeluTanh => "GELU(approximate='tanh')",
            Activation::Silu => "SiLU",
            Activation::Tanh => "Tanh",
            Activation::Sigmoid => "Sigmoid",
            Activation::Softplus => "Softplus",
            Activation::Mish => "Mish",
            Activation::QuickGelu => "QuickGELU",
            Activation::LeakyRelu(slope) => return format!("LeakyReLU(negative_slope={slope:?})"),
            Activation::Elu(alpha) => return format!("ELU(alpha={alpha:?})"),
            Activation::Selu => "SELU",
            Activation::Celu(alpha) => return format!("CELU(alpha={alpha:?})"),
            Activation::Hardtanh(lo, hi) => {
                return format!("Hardtanh(min_val={lo:?}, max_val={hi:?})")
            }
            Activation::Relu6 => "ReLU6",
            Activation::Hardsigmoid => "Hardsigmoid",
            Activation::Hardswish => "Hardswish",
            Activation::Softsign => "Softsign",
            Activation::LogSigmoid => "LogSigmoid",
        };
        name.into()
    }

    /// The activation as a layer.
    pub fn module(self) -> Box<dyn Module> {
        Box::new(ActivationLayer::new(self))
    }
}

/// An activation as a parameter-free module.
#[derive(Clone, Copy, Debug)]
pub struct ActivationLayer {
    pub kind: Activation,
    training: bool,
}

impl ActivationLayer {
    pub fn new(kind: Activation) -> Self {
        ActivationLayer {
            kind,
            training: true,
        }
    }
}

impl Module for ActivationLayer {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.kind.apply(x)
    }

    super::module::training_field!();

    fn title(&self) -> String {
        self.kind.class_name()
    }

    fn to_onnx(
        &self,
        g: &mut crate::io::onnx::export::GraphBuilder,
        _prefix: &str,
        x: &str,
    ) -> Result<String> {
        self.kind.to_onnx(g, x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_layers_apply_their_function() {
        let x = Tensor::from_vec(vec![-1f32, 0.5], &[2]).unwrap();
        let relu = ActivationLayer::new(Activation::Relu);
        assert_eq!(relu.forward(&x).unwrap().to_vec_f32().unwrap(), [0.0, 0.5]);
        let t = Activation::Tanh
            .module()
            .forward(&x)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert!((t[0] - (-1f32).tanh()).abs() < 1e-6);
        let m = Activation::Mish
            .module()
            .forward(&x)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let mish = |v: f32| v * (1.0 + v.exp()).ln().tanh();
        assert!((m[0] - mish(-1.0)).abs() < 1e-6 && (m[1] - mish(0.5)).abs() < 1e-6);
        let q = Activation::parse("quick_gelu")
            .unwrap()
            .apply(&x)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let quick = |v: f32| v / (1.0 + (-1.702 * v).exp());
        assert!((q[0] - quick(-1.0)).abs() < 1e-6 && (q[1] - quick(0.5)).abs() < 1e-6);
    }

    #[test]
    fn every_activation_reads_back_from_its_name() {
        for a in Activation::ALL {
            assert_eq!(Activation::parse(a.name()), Some(a));
            assert_eq!(Activation::parse(&a.name().to_uppercase()), Some(a));
        }
        assert_eq!(Activation::parse("swish"), Some(Activation::Silu));
        assert_eq!(Activation::parse("gelu_new"), Some(Activation::GeluTanh));
        assert_eq!(Activation::parse("leaky"), None);
    }

    #[test]
    fn layers_print_pytorchs_class() {
        assert_eq!(ActivationLayer::new(Activation::Silu).title(), "SiLU");
        assert_eq!(
            ActivationLayer::new(Activation::GeluTanh).title(),
            "GELU(approximate='tanh')"
        );
    }
}
