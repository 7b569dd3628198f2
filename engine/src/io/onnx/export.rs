//! Writing ONNX: a graph builder that modules lower themselves into (`Module::to_onnx`), and
//! the model file around it. Messages are the same prost declarations the reader decodes
//! ([`super::proto`]), with onnx.proto's field numbers; weights are F32 initializers in
//! `raw_data`, little-endian, as the ONNX spec lays them out.

use super::proto::{
    attribute_type as at, data_type, AttributeProto, Dimension, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, TypeProtoTensor, ValueInfoProto,
};
use crate::{DType, Device, Error, Result, Tensor};
use prost::Message;
use std::path::Path;

/// One dimension of a graph input or output: a number, or a name (`batch`) bound at run time.
#[derive(Clone, Debug, PartialEq)]
pub enum Dim {
    Fixed(usize),
    Named(String),
}

/// An operator attribute.
#[derive(Clone, Debug)]
pub enum Attr {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
}

/// A graph under construction: nodes in order, initializers, inputs and outputs. Value names
/// come from `fresh`, so lowering code never collides with itself.
#[derive(Default)]
pub struct OnnxGraph {
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    counter: usize,
}

/// The F32 value info `name` with `dims`.
fn value_info(name: &str, dims: &[Dim]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => Dimension {
                dim_value: Some(*n as i64),
                dim_param: None,
            },
            Dim::Named(s) => Dimension {
                dim_value: None,
                dim_param: Some(s.clone()),
            },
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: data_type::FLOAT,
                shape: Some(TensorShapeProto { dim }),
            }),
        }),
    }
}

impl OnnxGraph {
    pub fn new() -> Self {
        Self::default()
    }

    /// A value name not used before, starting with `hint`.
    pub fn fresh(&mut self, hint: &str) -> String {
        self.counter += 1;
        format!("{hint}_{}", self.counter)
    }

    /// Declares a graph input.
    pub fn input(&mut self, name: &str, dims: &[Dim]) -> String {
        self.inputs.push(value_info(name, dims));
        name.into()
    }

    /// Declares `value` a graph output under `name` (through an Identity when they differ).
    pub fn output(&mut self, value: &str, name: &str, dims: &[Dim]) {
        if value != name {
            self.nodes.push(NodeProto {
                input: vec![value.into()],
                output: vec![name.into()],
                name: format!("{name}_identity"),
                op_type: "Identity".into(),
                ..Default::default()
            });
        }
        self.outputs.push(value_info(name, dims));
    }

    /// A constant tensor named `name`, stored as F32 (a weight, or a shape as I64 when `t` is
    /// I64). Returns the name to use as a node input.
    pub fn initializer(&mut self, name: &str, t: &Tensor) -> Result<String> {
        let t = t.detach().to_device(Device::Cpu)?;
        let (data_type, raw_data) = match t.dtype() {
            DType::I64 => (
                data_type::INT64,
                t.to_vec::<i64>()?
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            ),
            _ => (
                data_type::FLOAT,
                t.to_vec::<f32>()?
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            ),
        };
        self.initializers.push(TensorProto {
            dims: t.dims().iter().map(|&d| d as i64).collect(),
            data_type,
            name: name.into(),
            raw_data,
            ..Default::default()
        });
        Ok(name.into())
    }

    /// A scalar F32 constant (a fresh name starting with `hint`).
    pub fn scalar(&mut self, hint: &str, v: f32) -> Result<String> {
        let name = self.fresh(hint);
        self.initializer(&name, &Tensor::from_vec(vec![v], &[])?)
    }

    /// Appends node `op` on `inputs` with `attrs`; returns its (single, fresh) output.
    pub fn node(&mut self, op: &str, inputs: &[&str], attrs: &[(&str, Attr)]) -> String {
        let out = self.fresh(&op.to_lowercase());
        let attribute = attrs
            .iter()
            .map(|(name, a)| {
                let mut p = AttributeProto {
                    name: (*name).into(),
                    ..Default::default()
                };
                match a {
                    Attr::Int(v) => (p.r#type, p.i) = (at::INT, *v),
                    Attr::Float(v) => (p.r#type, p.f) = (at::FLOAT, *v),
                    Attr::Ints(v) => (p.r#type, p.ints) = (at::INTS, v.clone()),
                }
                p
            })
            .collect();
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| (*s).into()).collect(),
            output: vec![out.clone()],
            name: out.clone(),
            op_type: op.into(),
            attribute,
            ..Default::default()
        });
        out
    }

    /// The model around the graph, for the default operator set `opset`.
    pub fn into_model(self, opset: i64, graph_name: &str) -> ModelProto {
        ModelProto {
            // IR version 8 goes with opsets up to 18 (onnx/docs/Versioning.md).
            ir_version: if opset <= 18 { 8 } else { 9 },
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: opset,
            }],
            producer_name: "rusting_brain".into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            graph: Some(GraphProto {
                node: self.nodes,
                name: graph_name.into(),
                initializer: self.initializers,
                input: self.inputs,
                output: self.outputs,
            }),
            metadata_props: Vec::new(),
        }
    }
}

/// Options of an export.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// The default operator set's version; 13 to 21 are accepted.
    pub opset: i64,
    /// The first input dimension is the named `batch` instead of a number.
    pub dynamic_batch: bool,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            opset: 17,
            dynamic_batch: true,
        }
    }
}

/// Writes `module` as an ONNX model whose input `input` has `input_shape` (batch first) and whose
/// output is `output`; the module must be in eval mode's behaviour (dropout is left out).
pub fn export_module(
    module: &dyn crate::nn::Module,
    input_shape: &[usize],
    path: impl AsRef<Path>,
    opts: &ExportOptions,
) -> Result<()> {
    if !(13..=21).contains(&opts.opset) {
        return Err(Error::invalid(
            "export_onnx",
            format!("opset {} is not supported (13 to 21)", opts.opset),
        ));
    }
    if input_shape.is_empty() {
        return Err(Error::invalid(
            "export_onnx",
            "the input shape needs at least the batch dimension",
        ));
    }
    let dims = |shape: &[usize]| -> Vec<Dim> {
        shape
            .iter()
            .enumerate()
            .map(|(i, &n)| match i {
                0 if opts.dynamic_batch => Dim::Named("batch".into()),
                _ => Dim::Fixed(n),
            })
            .collect()
    };
    let mut g = OnnxGraph::new();
    let x = g.input("input", &dims(input_shape));
    let y = module.to_onnx(&mut g, "", &x)?;
    // The output's shape, from running the module once on zeros of the input's shape.
    let probe = Tensor::zeros(input_shape, DType::F32, Device::Cpu)?;
    let module_device = module
        .parameters()
        .first()
        .map(|p| p.device())
        .unwrap_or(Device::Cpu);
    let out = crate::no_grad(|| module.forward(&probe.to_device(module_device)?))?;
    g.output(&y, "output", &dims(out.dims()));
    let bytes = g.into_model(opts.opset, "main").encode_to_vec();
    let path = path.as_ref();
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}
