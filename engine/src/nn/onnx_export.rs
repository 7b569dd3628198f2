//! A module written as an ONNX model: each layer adds its nodes (`Module::to_onnx`) to the
//! graph that `io::onnx::export` builds and writes.

use super::Module;
use crate::io::onnx::export::{write_model, ExportOptions, GraphBuilder};
use crate::{DType, Device, Error, Result, Tensor};
use std::path::Path;

/// Writes `module` as an ONNX model whose input `input` has `input_shape` (batch first) and whose
/// output is `output`; the module must be in eval mode's behaviour (dropout is left out).
pub fn export_module(
    module: &dyn Module,
    input_shape: &[usize],
    path: impl AsRef<Path>,
    opts: &ExportOptions,
) -> Result<()> {
    let mut g = GraphBuilder::new(opts.checked_opset()?);
    if input_shape.is_empty() {
        return Err(Error::invalid(
            "export_onnx",
            "the input shape needs at least the batch dimension",
        ));
    }
    let x = g.input("input", &opts.dims(input_shape), DType::F32);
    let y = module.to_onnx(&mut g, "", &x)?;
    // The output's shape, from running the module once on zeros of the input's shape.
    let probe = Tensor::zeros(input_shape, DType::F32, Device::Cpu)?;
    let module_device = module
        .parameters()
        .first()
        .map(|p| p.device())
        .unwrap_or(Device::Cpu);
    let out = crate::no_grad(|| module.forward(&probe.to_device(module_device)?))?;
    g.output(&y, "output", &opts.dims(out.dims()));
    write_model(g, path)
}
