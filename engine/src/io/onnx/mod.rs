//! ONNX models read through prost: the graph's nodes, initializers, inputs and outputs, the
//! opset, and the metadata (which ultralytics fills with Python literals, see
//! [`parse_python_literal`]).
//!
//! The protobuf messages are declared in Rust ([`proto`]) with onnx.proto's field numbers, so
//! no code generation is needed. Corrupt bytes give prost's decode error; tensors are checked
//! against their dims ([`tensor`]).

pub mod export;
mod literal;
pub mod proto;
mod tensor;
#[cfg(test)]
mod tests;

pub use literal::parse_python_literal;

use crate::{Error, Result, Tensor};
use prost::Message;
use proto::{attribute_type as at, AttributeProto, ValueInfoProto};
use std::path::Path;

/// The engine dtype an ONNX `TensorProto.DataType` loads as (narrow integers widen to I64).
pub fn onnx_dtype(data_type: i32) -> Option<crate::DType> {
    tensor::layout(data_type).map(|(dtype, _)| dtype)
}

/// A decoded ONNX model.
#[derive(Clone, Debug)]
pub struct OnnxModel {
    pub ir_version: i64,
    pub producer: String,
    pub producer_version: String,
    /// The version of the default (`ai.onnx`) operator set, 0 when none is imported.
    pub opset: i64,
    /// Every imported operator set: (domain, version).
    pub opsets: Vec<(String, i64)>,
    /// `metadata_props` in file order.
    pub metadata: Vec<(String, String)>,
    pub initializers: Vec<(String, Tensor)>,
    pub nodes: Vec<OnnxNode>,
    /// Graph inputs and outputs with their dims; a symbolic dim (`batch`) is -1.
    pub inputs: Vec<(String, Vec<i64>)>,
    pub outputs: Vec<(String, Vec<i64>)>,
}

impl OnnxModel {
    /// The metadata value under `key`.
    pub fn metadata_value(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The initializer named `name`.
    pub fn initializer(&self, name: &str) -> Option<&Tensor> {
        self.initializers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
    }
}

/// One graph node.
#[derive(Clone, Debug)]
pub struct OnnxNode {
    pub name: String,
    pub op_type: String,
    pub domain: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attributes: Vec<(String, OnnxAttribute)>,
}

impl OnnxNode {
    pub fn attribute(&self, name: &str) -> Option<&OnnxAttribute> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a)
    }
}

/// A node attribute's value.
#[derive(Clone, Debug)]
pub enum OnnxAttribute {
    Float(f32),
    Int(i64),
    /// Bytes, by ONNX's definition; usually UTF-8 text.
    String(Vec<u8>),
    Tensor(Tensor),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<Vec<u8>>),
    Tensors(Vec<Tensor>),
    /// A kind this reader does not decode (graphs, sparse tensors, type protos), by ONNX's
    /// `AttributeType` number.
    Unsupported(i32),
}

/// Reads an ONNX model file.
pub fn read_onnx(path: &Path) -> Result<OnnxModel> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    read_onnx_bytes(&bytes).map_err(|e| match e {
        Error::Format { format, msg } => Error::Format {
            format,
            msg: format!("{}: {msg}", path.display()),
        },
        e => e,
    })
}

/// Decodes one serialized `TensorProto` (the `.pb` files of ONNX's test data sets), with its
/// name.
pub fn read_tensor_proto(bytes: &[u8]) -> Result<(String, Tensor)> {
    let t = proto::TensorProto::decode(bytes)
        .map_err(|e| Error::format("onnx", format!("not a valid TensorProto: {e}")))?;
    Ok((t.name.clone(), tensor::decode_tensor(&t)?))
}

/// Reads an ONNX model held in memory.
pub fn read_onnx_bytes(bytes: &[u8]) -> Result<OnnxModel> {
    let model = proto::ModelProto::decode(bytes)
        .map_err(|e| Error::format("onnx", format!("not a valid ONNX model: {e}")))?;
    let graph = model
        .graph
        .ok_or_else(|| Error::format("onnx", "the model has no graph"))?;
    let opsets: Vec<(String, i64)> = model
        .opset_import
        .iter()
        .map(|o| (o.domain.clone(), o.version))
        .collect();
    let opset = opsets
        .iter()
        .find(|(d, _)| d.is_empty() || d == "ai.onnx")
        .map_or(0, |(_, v)| *v);
    let initializers = graph
        .initializer
        .iter()
        .map(|t| Ok((t.name.clone(), tensor::decode_tensor(t)?)))
        .collect::<Result<_>>()?;
    let nodes = graph
        .node
        .iter()
        .map(|n| {
            let attributes = n
                .attribute
                .iter()
                .map(|a| {
                    Ok((
                        a.name.clone(),
                        attribute(a).map_err(|e| in_node(&n.name, e))?,
                    ))
                })
                .collect::<Result<_>>()?;
            Ok(OnnxNode {
                name: n.name.clone(),
                op_type: n.op_type.clone(),
                domain: n.domain.clone(),
                inputs: n.input.clone(),
                outputs: n.output.clone(),
                attributes,
            })
        })
        .collect::<Result<_>>()?;
    Ok(OnnxModel {
        ir_version: model.ir_version,
        producer: model.producer_name,
        producer_version: model.producer_version,
        opset,
        opsets,
        metadata: model
            .metadata_props
            .into_iter()
            .map(|p| (p.key, p.value))
            .collect(),
        initializers,
        nodes,
        inputs: graph.input.iter().map(value_info).collect(),
        outputs: graph.output.iter().map(value_info).collect(),
    })
}

fn in_node(node: &str, e: Error) -> Error {
    match e {
        Error::Format { format, msg } => Error::Format {
            format,
            msg: format!("node `{node}`: {msg}"),
        },
        e => e,
    }
}

fn attribute(a: &AttributeProto) -> Result<OnnxAttribute> {
    let tensor = |t: &Option<proto::TensorProto>| match t {
        Some(t) => tensor::decode_tensor(t),
        None => Err(Error::format(
            "onnx",
            format!("attribute `{}` has no tensor", a.name),
        )),
    };
    Ok(match a.r#type {
        at::FLOAT => OnnxAttribute::Float(a.f),
        at::INT => OnnxAttribute::Int(a.i),
        at::STRING => OnnxAttribute::String(a.s.clone()),
        at::TENSOR => OnnxAttribute::Tensor(tensor(&a.t)?),
        at::FLOATS => OnnxAttribute::Floats(a.floats.clone()),
        at::INTS => OnnxAttribute::Ints(a.ints.clone()),
        at::STRINGS => OnnxAttribute::Strings(a.strings.clone()),
        at::TENSORS => OnnxAttribute::Tensors(
            a.tensors
                .iter()
                .map(tensor::decode_tensor)
                .collect::<Result<_>>()?,
        ),
        other => OnnxAttribute::Unsupported(other),
    })
}

fn value_info(v: &ValueInfoProto) -> (String, Vec<i64>) {
    let dims = v
        .r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .and_then(|t| t.shape.as_ref())
        .map(|s| s.dim.iter().map(|d| d.dim_value.unwrap_or(-1)).collect())
        .unwrap_or_default();
    (v.name.clone(), dims)
}
