//! A multi-layer perceptron: Linear layers with an activation between them (none after the
//! last). Its layers live in a `Sequential` named `layers`, so parameter names read
//! `layers.0.weight`, `layers.2.bias`, as the same model would in PyTorch.

use super::activation::Activation;
use super::linear::Linear;
use super::module::Module;
use super::sequential::Sequential;
use crate::{Error, Generator, Result, Tensor};

pub struct Mlp {
    pub layers: Sequential,
    training: bool,
}

impl Mlp {
    /// `sizes` = [input, hidden..., output]; every Linear has a bias.
    pub fn new(sizes: &[usize], activation: Activation, gen: &mut Generator) -> Result<Self> {
        if sizes.len() < 2 {
            return Err(Error::invalid(
                "Mlp",
                format!("needs at least an input and an output size, got {sizes:?}"),
            ));
        }
        let mut layers = Sequential::new();
        for (i, pair) in sizes.windows(2).enumerate() {
            if i > 0 {
                layers.push(activation.module());
            }
            layers.push(Box::new(Linear::new(pair[0], pair[1], true, gen)?));
        }
        Ok(Mlp {
            layers,
            training: true,
        })
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.layers.forward(x)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("layers".into(), &self.layers)]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.layers]
    }

    super::module::training_field!();

    fn input_shape(&self) -> Option<Vec<usize>> {
        self.layers.input_shape()
    }

    fn to_onnx(
        &self,
        g: &mut crate::io::onnx::export::GraphBuilder,
        prefix: &str,
        x: &str,
    ) -> Result<String> {
        self.layers.to_onnx(g, &format!("{prefix}layers."), x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlp_maps_input_width_to_output_width_and_propagates_eval() {
        let mut m = Mlp::new(&[2, 8, 8, 3], Activation::Gelu, &mut Generator::new(0)).unwrap();
        let x = Tensor::from_vec(vec![0.1f32; 10], &[5, 2]).unwrap();
        assert_eq!(m.forward(&x).unwrap().shape(), [5, 3]);
        assert_eq!(m.num_parameters(), 2 * 8 + 8 + 8 * 8 + 8 + 8 * 3 + 3);
        m.eval();
        assert!(m.layers.layers().iter().all(|l| !l.is_training()));
    }
}
