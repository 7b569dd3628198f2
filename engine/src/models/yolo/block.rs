//! The plumbing every YOLO block shares: a block lists its named children once, and the
//! `Module` methods (parameter names, buffers, train mode) follow from that list, so names come
//! out as ultralytics writes them (`cv1.conv.weight`, `m.0.cv2.bn.running_mean`).

use crate::io::onnx::export::OnnxGraph;
use crate::nn::{prefixed, Module};
use crate::{Result, Tensor};

pub trait Block: Send + Sync {
    fn run(&self, x: &Tensor) -> Result<Tensor>;
    /// Children with their dotted names, in registration order.
    fn children(&self) -> Vec<(String, &dyn Module)>;
    fn children_mut(&mut self) -> Vec<&mut dyn Module>;
    fn training(&self) -> bool;
    fn set_training(&mut self, on: bool);
    /// The eval-mode forward as ONNX operators reading value `x` (see `Module::to_onnx`).
    fn lower(&self, g: &mut OnnxGraph, prefix: &str, x: &str) -> Result<String>;
}

impl<B: Block> Module for B {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.run(x)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.children()
            .into_iter()
            .flat_map(|(name, child)| prefixed(&name, child.named_parameters()))
            .collect()
    }

    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        self.children()
            .into_iter()
            .flat_map(|(name, child)| prefixed(&name, child.named_buffers()))
            .collect()
    }

    fn train(&mut self, on: bool) {
        self.set_training(on);
        for child in self.children_mut() {
            child.train(on);
        }
    }

    fn is_training(&self) -> bool {
        self.training()
    }

    fn to_onnx(&self, g: &mut OnnxGraph, prefix: &str, x: &str) -> Result<String> {
        self.lower(g, prefix, x)
    }
}

/// Lowers the named `child` of a block (its dotted name joins `prefix`).
pub fn lower_child(
    g: &mut OnnxGraph,
    prefix: &str,
    name: &str,
    child: &dyn Module,
    x: &str,
) -> Result<String> {
    child.to_onnx(g, &format!("{prefix}{name}."), x)
}

/// `name.0`, `name.1`, ... for a list of children (a ModuleList or nn.Sequential).
pub fn indexed<'a, T: Module>(name: &str, list: &'a [T]) -> Vec<(String, &'a dyn Module)> {
    list.iter()
        .enumerate()
        .map(|(i, m)| (format!("{name}.{i}"), m as &dyn Module))
        .collect()
}

pub fn indexed_mut<T: Module>(list: &mut [T]) -> Vec<&mut dyn Module> {
    list.iter_mut().map(|m| m as &mut dyn Module).collect()
}
