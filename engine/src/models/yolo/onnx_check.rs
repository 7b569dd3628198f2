//! A YOLO `.onnx` loads as our network (trainable, with the fused kernels, NMS and metrics of
//! `YoloModel`) by mapping the file's weights onto it, which is right only when the file's graph
//! is that network. So the file's graph is compared with the one our own export of the loaded
//! network gives (which lowers each layer as ultralytics' exporter does): every operator must be
//! one a YOLO export uses, every convolution of either graph must be in the other with the same
//! weight, geometry and activation. A file edited to compute something else (an unknown
//! operator, HardSigmoid for Sigmoid, another stride) is refused with the first difference;
//! `graph::OnnxGraph` (`onnx::load` in scripts) runs any such file as its own graph instead.

use super::network::YoloModel;
use crate::io::onnx::export::ExportOptions;
use crate::io::onnx::{read_onnx_bytes, OnnxAttribute, OnnxModel, OnnxNode};
use crate::{Error, Result};
use prost::Message;
use std::collections::{BTreeMap, HashMap};

/// The operators of ultralytics' YOLOv8/YOLO11 exports (static and dynamic shapes) and ours.
const YOLO_OPS: &[&str] = &[
    "Add",
    "Cast",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "Div",
    "Equal",
    "Expand",
    "Gather",
    "Identity",
    "MatMul",
    "MaxPool",
    "Mul",
    "Range",
    "ReduceSum",
    "Reshape",
    "Resize",
    "Shape",
    "Sigmoid",
    "Slice",
    "Softmax",
    "Split",
    "Squeeze",
    "Sub",
    "Transpose",
    "Unsqueeze",
    "Where",
];

/// What a convolution computes: its weight's shape, its geometry, and the operators that take
/// its output when they are its activation (SiLU: Sigmoid and Mul).
#[derive(Debug, PartialEq)]
struct ConvSignature {
    geometry: Vec<(String, String)>,
    activation: Vec<String>,
}

/// Refuses `file` unless its graph is the network `model` (loaded from its weights) computes.
pub(super) fn check_graph(file: &OnnxModel, model: &YoloModel, origin: &str) -> Result<()> {
    let refuse = |msg: String| {
        Error::format(
            "onnx",
            format!(
                "{origin}: the graph is not the YOLO network its weights belong to ({msg}); \
                 only the weights are read, so this file would predict something else"
            ),
        )
    };
    if let Some(n) = file.nodes.iter().find(|n| {
        !YOLO_OPS.contains(&n.op_type.as_str()) || !matches!(n.domain.as_str(), "" | "ai.onnx")
    }) {
        return Err(refuse(format!(
            "node {:?} is a {}{}, which a YOLO export does not use",
            n.name,
            if n.domain.is_empty() {
                String::new()
            } else {
                format!("{}.", n.domain)
            },
            n.op_type
        )));
    }
    let side = 2 * model.max_stride();
    let ours = model.onnx_graph((side, side), &ExportOptions::default())?;
    let ours = read_onnx_bytes(&ours.into_model("reference").encode_to_vec())?;
    let (want, got) = (convolutions(&ours), convolutions(file));
    for (weight, w) in &want {
        match got.get(weight) {
            None => return Err(refuse(format!("no convolution uses {weight}"))),
            Some(g) if g != w => {
                return Err(refuse(format!(
                    "the convolution of {weight} has {g:?} in the file, {w:?} in the network"
                )))
            }
            Some(_) => {}
        }
    }
    if let Some(extra) = got.keys().find(|k| !want.contains_key(*k)) {
        return Err(refuse(format!(
            "a convolution uses {extra}, which the network has no place for"
        )));
    }
    Ok(())
}

/// Each Conv node's signature, by its weight's name; a weight that two convolutions use is
/// given again as `twice: <weight>`, which the network never has.
fn convolutions(m: &OnnxModel) -> BTreeMap<String, ConvSignature> {
    let mut consumers: HashMap<&str, Vec<&OnnxNode>> = HashMap::new();
    for n in &m.nodes {
        for i in &n.inputs {
            consumers.entry(i.as_str()).or_default().push(n);
        }
    }
    m.nodes
        .iter()
        .filter(|n| n.op_type == "Conv")
        .filter_map(|n| {
            let weight = n.inputs.get(1)?.clone();
            let attr = |name: &str, default: &str| {
                let text = match n.attribute(name) {
                    Some(OnnxAttribute::Ints(v)) => format!("{v:?}"),
                    Some(OnnxAttribute::Int(v)) => v.to_string(),
                    Some(other) => format!("{other:?}"),
                    None => default.to_string(),
                };
                (name.to_string(), text)
            };
            let shape = m.initializer(&weight).map(|t| format!("{:?}", t.shape()));
            // The bias by name: the loader reads `model.*` initializers only, so a bias from
            // anywhere else would be computed with but never loaded.
            let bias = n.inputs.get(2).cloned().unwrap_or_else(|| "none".into());
            let geometry = vec![
                (
                    "weight".to_string(),
                    shape.unwrap_or_else(|| "not a constant".into()),
                ),
                ("bias".to_string(), bias),
                attr("strides", "[1, 1]"),
                attr("pads", "[0, 0, 0, 0]"),
                attr("dilations", "[1, 1]"),
                attr("group", "1"),
            ];
            // Activations are the elementwise operators on the output; plumbing (reshapes,
            // concatenations, the next layer) is left out, as exporters differ there.
            let mut activation: Vec<String> = n
                .outputs
                .first()
                .and_then(|o| consumers.get(o.as_str()))
                .into_iter()
                .flatten()
                .map(|c| c.op_type.clone())
                .filter(|op| matches!(op.as_str(), "Sigmoid" | "Mul"))
                .collect();
            activation.sort();
            Some((
                weight,
                ConvSignature {
                    geometry,
                    activation,
                },
            ))
        })
        .fold(BTreeMap::new(), |mut all, (weight, sig)| {
            let key = match all.contains_key(&weight) {
                true => format!("twice: {weight}"),
                false => weight,
            };
            all.insert(key, sig);
            all
        })
}
