//! Sequential: children run in order and are named "0", "1", ... as in torch.nn.Sequential, so
//! its parameter names match PyTorch checkpoints (`0.weight`, `2.bias`).

use super::module::Module;
use crate::{Result, Tensor};

pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
    training: bool,
}

impl Default for Sequential {
    fn default() -> Self {
        Sequential {
            layers: Vec::new(),
            training: true,
        }
    }
}

impl Sequential {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a layer; it takes the next index as its name.
    pub fn push(&mut self, layer: Box<dyn Module>) {
        self.layers.push(layer);
    }

    /// Builder form of `push`.
    pub fn with(mut self, layer: impl Module + 'static) -> Self {
        self.push(Box::new(layer));
        self
    }

    pub fn len(&self) -> usize {
        self.layers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&dyn Module> {
        self.layers.get(i).map(|l| l.as_ref())
    }

    pub fn layers(&self) -> &[Box<dyn Module>] {
        &self.layers
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for layer in &self.layers {
            h = layer.forward(&h)?;
        }
        Ok(h)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        super::module::indexed("", self.layers.iter().map(|l| l.as_ref()))
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        self.layers
            .iter_mut()
            .map(|l| l.as_mut() as &mut dyn Module)
            .collect()
    }

    super::module::training_field!();

    fn input_shape(&self) -> Option<Vec<usize>> {
        self.layers.first()?.input_shape()
    }

    fn to_onnx(
        &self,
        g: &mut crate::io::onnx::export::GraphBuilder,
        prefix: &str,
        x: &str,
    ) -> Result<String> {
        let mut h = x.to_string();
        for (i, layer) in self.layers.iter().enumerate() {
            h = layer.to_onnx(g, &format!("{prefix}{i}."), &h)?;
        }
        Ok(h)
    }
}
