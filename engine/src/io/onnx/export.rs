//! Writing ONNX: a graph builder that modules lower themselves into (`Module::to_onnx`), and
//! the model file around it. Messages are the same prost declarations the reader decodes
//! ([`super::proto`]), with onnx.proto's field numbers; weights are F32 initializers in
//! `raw_data`, little-endian, as the ONNX spec lays them out.

use super::proto::{
    attribute_type as at, data_type, AttributeProto, Dimension, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto,
    TypeProtoTensor, ValueInfoProto,
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
    Str(&'static str),
}

/// A graph under construction for one operator set: nodes in order, initializers, inputs and
/// outputs. Value names come from `fresh`, so lowering code never collides with itself.
pub struct GraphBuilder {
    opset: i64,
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    counter: usize,
    /// The model's `metadata_props`, in order.
    metadata: Vec<(String, String)>,
}

/// The ONNX element type of graph inputs and outputs of `dtype`: token ids are I64, everything
/// else is F32 (initializers and values are written in F32 whatever the model's dtype).
fn elem_type(dtype: DType) -> i32 {
    match dtype.is_float() {
        true => data_type::FLOAT,
        false => data_type::INT64,
    }
}

/// The value info `name` of `dtype` with `dims`.
fn value_info(name: &str, dims: &[Dim], dtype: DType) -> ValueInfoProto {
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
                elem_type: elem_type(dtype),
                shape: Some(TensorShapeProto { dim }),
            }),
        }),
    }
}

impl GraphBuilder {
    /// An empty graph for the default operator set `opset`; lowering code asks `opset()` where
    /// an operator's signature changed between versions.
    pub fn new(opset: i64) -> Self {
        GraphBuilder {
            opset,
            nodes: Vec::new(),
            initializers: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            counter: 0,
            metadata: Vec::new(),
        }
    }

    /// A `metadata_props` entry of the model (ultralytics keeps its class names there).
    pub fn metadata(&mut self, key: &str, value: impl Into<String>) {
        self.metadata.push((key.into(), value.into()));
    }

    pub fn opset(&self) -> i64 {
        self.opset
    }

    /// A value name not used before, starting with `hint`.
    pub fn fresh(&mut self, hint: &str) -> String {
        self.counter += 1;
        format!("{hint}_{}", self.counter)
    }

    /// Declares a graph input of `dtype` (F32 for floats, I64 for integers).
    pub fn input(&mut self, name: &str, dims: &[Dim], dtype: DType) -> String {
        self.inputs.push(value_info(name, dims, dtype));
        name.into()
    }

    /// Declares F32 `value` a graph output under `name` (through an Identity when they differ).
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
        self.outputs.push(value_info(name, dims, DType::F32));
    }

    /// A constant tensor named `name`, stored as F32 (a weight in any float dtype, or a shape
    /// as I64 when `t` is I64). Returns the name to use as a node input.
    pub fn initializer(&mut self, name: &str, t: &Tensor) -> Result<String> {
        let mut t = t.detach().to_device(Device::Cpu)?;
        if t.dtype().is_float() && t.dtype() != DType::F32 {
            t = t.to_dtype(DType::F32)?;
        }
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

    /// A 1-D I64 constant (axes, shapes, slice bounds), under a fresh name starting with `hint`.
    pub fn ints(&mut self, hint: &str, values: &[i64]) -> Result<String> {
        let name = self.fresh(hint);
        self.initializer(&name, &Tensor::from_vec(values.to_vec(), &[values.len()])?)
    }

    /// Elements [start, end) of `x` along `axis` (a Slice with constant bounds).
    pub fn slice(&mut self, x: &str, axis: i64, start: usize, end: usize) -> Result<String> {
        let from = self.ints("start", &[start as i64])?;
        let to = self.ints("end", &[end as i64])?;
        let axis = self.ints("axis", &[axis])?;
        Ok(self.node("Slice", &[x, &from, &to, &axis], &[]))
    }

    /// Values joined along `axis`.
    pub fn concat<S: AsRef<str>>(&mut self, xs: &[S], axis: i64) -> String {
        let xs: Vec<&str> = xs.iter().map(AsRef::as_ref).collect();
        self.node("Concat", &xs, &[("axis", Attr::Int(axis))])
    }

    /// The mean over the last axis, kept as a dimension of one: ReduceMean takes its axes as an
    /// attribute up to opset 17 and as an input from 18.
    pub fn mean_last_axis(&mut self, x: &str) -> Result<String> {
        let keep = ("keepdims", Attr::Int(1));
        Ok(if self.opset >= 18 {
            let axes = self.ints("axes", &[-1])?;
            self.node("ReduceMean", &[x, &axes], &[keep])
        } else {
            self.node("ReduceMean", &[x], &[keep, ("axes", Attr::Ints(vec![-1]))])
        })
    }

    /// Appends node `op` on `inputs` with `attrs`; returns its (single, fresh) output.
    pub fn node(&mut self, op: &str, inputs: &[&str], attrs: &[(&str, Attr)]) -> String {
        self.node_outputs(op, inputs, attrs, 1).remove(0)
    }

    /// Appends node `op` with `n` fresh outputs (TopK's values and indices, say).
    pub fn node_outputs(
        &mut self,
        op: &str,
        inputs: &[&str],
        attrs: &[(&str, Attr)],
        n: usize,
    ) -> Vec<String> {
        let outs: Vec<String> = (0..n.max(1))
            .map(|_| self.fresh(&op.to_lowercase()))
            .collect();
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
                    Attr::Str(v) => (p.r#type, p.s) = (at::STRING, v.as_bytes().to_vec()),
                }
                p
            })
            .collect();
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| (*s).into()).collect(),
            output: outs.clone(),
            name: outs[0].clone(),
            op_type: op.into(),
            attribute,
            ..Default::default()
        });
        outs
    }

    /// The model around the graph.
    pub fn into_model(self, graph_name: &str) -> ModelProto {
        let opset = self.opset;
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
            metadata_props: self
                .metadata
                .into_iter()
                .map(|(key, value)| StringStringEntryProto { key, value })
                .collect(),
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

impl ExportOptions {
    /// The operator set, checked against the range the lowerings are written for.
    pub fn checked_opset(&self) -> Result<i64> {
        if !(13..=21).contains(&self.opset) {
            return Err(Error::invalid(
                "export_onnx",
                format!("opset {} is not supported (13 to 21)", self.opset),
            ));
        }
        Ok(self.opset)
    }

    /// Graph dimensions for `shape`: the first is the named `batch` under `dynamic_batch`.
    pub fn dims(&self, shape: &[usize]) -> Vec<Dim> {
        shape
            .iter()
            .enumerate()
            .map(|(i, &n)| match i {
                0 if self.dynamic_batch => Dim::Named("batch".into()),
                _ => Dim::Fixed(n),
            })
            .collect()
    }
}

/// A protobuf message cannot exceed 2 GiB, so weights beyond this total go to a side file.
const INLINE_WEIGHT_LIMIT: usize = 1 << 30;

/// Writes the model of graph `g` to `path`. When its weights pass 1 GiB they are stored
/// beside it in `<file>.data` as ONNX external data (offsets aligned to 64 bytes), which
/// onnxruntime and `onnx.load` read from the model's folder.
pub fn write_model(g: GraphBuilder, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let mut model = g.into_model("main");
    let graph = model.graph.as_mut().expect("into_model sets the graph");
    let total: usize = graph.initializer.iter().map(|t| t.raw_data.len()).sum();
    if total > INLINE_WEIGHT_LIMIT {
        let file_name = format!(
            "{}.data",
            path.file_name()
                .map_or("model.onnx".into(), |n| n.to_string_lossy())
        );
        let mut data = Vec::with_capacity(total);
        for t in graph
            .initializer
            .iter_mut()
            .filter(|t| t.raw_data.len() > 1024)
        {
            data.resize(data.len().next_multiple_of(64), 0);
            let entry = |key: &str, value: String| StringStringEntryProto {
                key: key.into(),
                value,
            };
            t.external_data = vec![
                entry("location", file_name.clone()),
                entry("offset", data.len().to_string()),
                entry("length", t.raw_data.len().to_string()),
            ];
            t.data_location = 1;
            data.append(&mut t.raw_data);
        }
        let data_path = path.with_file_name(&file_name);
        std::fs::write(&data_path, data).map_err(|e| Error::io(&data_path, e))?;
    }
    std::fs::write(path, model.encode_to_vec()).map_err(|e| Error::io(path, e))
}
