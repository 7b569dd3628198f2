//! Softmax and log-softmax over one dim as layers (torch.nn.Softmax, torch.nn.LogSoftmax), for
//! the end of a classifier in a `Sequential`.

use super::module::Module;
use crate::io::onnx::export::{Attr, GraphBuilder};
use crate::{Result, Tensor};

pub struct Softmax {
    pub dim: isize,
    /// Log-softmax instead: log of the same, computed stably in one op.
    pub log: bool,
    training: bool,
}

impl Softmax {
    pub fn new(dim: isize) -> Self {
        Softmax {
            dim,
            log: false,
            training: true,
        }
    }

    pub fn log(dim: isize) -> Self {
        Softmax {
            log: true,
            ..Softmax::new(dim)
        }
    }
}

impl Module for Softmax {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.log {
            true => x.log_softmax(self.dim),
            false => x.softmax(self.dim),
        }
    }

    super::module::training_field!();

    fn title(&self) -> String {
        let name = if self.log { "LogSoftmax" } else { "Softmax" };
        format!("{name}(dim={})", self.dim)
    }

    /// ONNX's Softmax and LogSoftmax normalise over one axis from opset 13, the lowest the
    /// export writes.
    fn to_onnx(&self, g: &mut GraphBuilder, _prefix: &str, x: &str) -> Result<String> {
        let op = if self.log { "LogSoftmax" } else { "Softmax" };
        Ok(g.node(op, &[x], &[("axis", Attr::Int(self.dim as i64))]))
    }
}
