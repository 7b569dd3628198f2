//! ONNX graphs run as graphs: every node of the file executed in order through the engine's
//! ops (see [`ops`] for the operator set), on the CPU or a GPU, with gradients in training mode.
//! The graph is a [`Module`]: its float tensors are its parameters (the running statistics
//! BatchNormalization reads and the scalar constants its buffers), so `print`, `state_dict`,
//! `to_device` and the optimizers work on it as on any layer.
//!
//! Every node's operator is checked when the file is read: a graph with an operator, a domain
//! or an attribute value this runtime does not implement is refused by name, never run with a
//! silent substitute.

mod node;
mod ops;

use crate::io::onnx::{read_onnx, OnnxModel, OnnxNode};
use crate::nn::Module;
use crate::{Device, Error, Result, Tensor};
use node::Node;
use std::collections::HashMap;
use std::path::Path;

pub use ops::supported as supported_operators;

/// A loaded ONNX graph, ready to run.
pub struct OnnxGraph {
    /// The file's producer and version, for `print`.
    pub producer: String,
    pub opset: i64,
    nodes: Vec<OnnxNode>,
    /// Float tensors of more than one element, trainable.
    weights: Vec<(String, Tensor)>,
    /// Float state that is not trained: BatchNormalization's statistics and scalars.
    buffers: Vec<(String, Tensor)>,
    /// Integer and boolean initializers and constants (shapes, axes, indices): on the host.
    host: Vec<(String, Tensor)>,
    /// Inputs the caller feeds, with their declared dims (-1 where symbolic).
    pub inputs: Vec<(String, Vec<i64>)>,
    pub outputs: Vec<String>,
    /// After which node each value is last read, so it is freed there.
    last_use: HashMap<String, usize>,
    training: bool,
}

impl OnnxGraph {
    /// Reads an ONNX file and checks that every node can run.
    pub fn load(path: &Path) -> Result<OnnxGraph> {
        Self::from_model(read_onnx(path)?).map_err(|e| match e {
            Error::Format { format, msg } => Error::Format {
                format,
                msg: format!("{}: {msg}", path.display()),
            },
            e => e,
        })
    }

    /// Builds the graph from a decoded model: checks each node's domain and operator, folds the
    /// Constant nodes, and sorts the initializers into weights, buffers and host values.
    pub fn from_model(model: OnnxModel) -> Result<OnnxGraph> {
        let opset = model.opset;
        if opset == 0 {
            return Err(Error::format(
                "onnx",
                "the model imports no ai.onnx operator set",
            ));
        }
        for node in &model.nodes {
            check_node(node, opset)?;
        }
        let statistics: std::collections::HashSet<String> = model
            .nodes
            .iter()
            .filter(|n| n.op_type == "BatchNormalization")
            .flat_map(|n| n.inputs.iter().skip(3).take(2).cloned())
            .collect();
        let (mut weights, mut buffers, mut host) = (Vec::new(), Vec::new(), Vec::new());
        // Exporters differ in where weights go (torch: initializers; paddle2onnx: Constant
        // nodes), so a float tensor of more than one element is a weight either way; scalars
        // (a GELU's 0.5, a hard-swish's 6) and BatchNormalization's statistics are buffers.
        let mut sort = |name: String, t: Tensor| -> Result<()> {
            if !t.dtype().is_float() {
                host.push((name, t));
            } else if t.numel() <= 1 || statistics.contains(&name) {
                buffers.push((name, t));
            } else {
                weights.push((name, t.requires_grad_()?));
            }
            Ok(())
        };
        for (name, t) in model.initializers.iter().cloned() {
            sort(name, t)?;
        }
        let mut nodes = Vec::with_capacity(model.nodes.len());
        for def in model.nodes {
            if def.op_type == "Constant" {
                let outputs = run_node(&def, Vec::new(), opset)?;
                for (name, t) in def.outputs.iter().cloned().zip(outputs) {
                    sort(name, t)?;
                }
            } else {
                nodes.push(def);
            }
        }
        let known: std::collections::HashSet<&str> =
            model.initializers.iter().map(|(n, _)| n.as_str()).collect();
        let inputs: Vec<(String, Vec<i64>)> = model
            .inputs
            .into_iter()
            .filter(|(n, _)| !known.contains(n.as_str()))
            .collect();
        let outputs: Vec<String> = model.outputs.into_iter().map(|(n, _)| n).collect();
        let mut last_use = HashMap::new();
        for (i, node) in nodes.iter().enumerate() {
            for name in node.inputs.iter().filter(|n| !n.is_empty()) {
                last_use.insert(name.clone(), i);
            }
        }
        for name in &outputs {
            last_use.insert(name.clone(), usize::MAX);
        }
        Ok(OnnxGraph {
            producer: format!("{} {}", model.producer, model.producer_version)
                .trim()
                .to_string(),
            opset,
            nodes,
            weights,
            buffers,
            host,
            inputs,
            outputs,
            last_use,
            training: false,
        })
    }

    /// The device the weights are on (the CPU for a graph without float weights).
    pub fn device(&self) -> Device {
        self.weights
            .iter()
            .chain(&self.buffers)
            .map(|(_, t)| t.device())
            .next()
            .unwrap_or(Device::Cpu)
    }

    /// How many nodes run (Constant nodes are folded when the file is read).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Runs the graph on named inputs; gives every graph output by name, in the file's order.
    /// Inputs move to the weights' device. Gradients are recorded in training mode, or when
    /// an input asks for them (a saliency map); otherwise the run keeps no graph.
    pub fn run(&self, feeds: &[(String, Tensor)]) -> Result<Vec<(String, Tensor)>> {
        if self.training || feeds.iter().any(|(_, t)| t.requires_grad()) {
            self.execute(feeds)
        } else {
            crate::no_grad(|| self.execute(feeds))
        }
    }

    fn execute(&self, feeds: &[(String, Tensor)]) -> Result<Vec<(String, Tensor)>> {
        let device = self.device();
        let mut values: HashMap<String, Tensor> = HashMap::new();
        for (name, t) in self.weights.iter().chain(&self.buffers).chain(&self.host) {
            values.insert(name.clone(), t.clone());
        }
        for (name, t) in feeds {
            let Some((_, dims)) = self.inputs.iter().find(|(n, _)| n == name) else {
                return Err(Error::invalid(
                    "onnx",
                    format!(
                        "the graph has no input `{name}`; its inputs: {}",
                        self.input_list()
                    ),
                ));
            };
            check_dims(name, dims, t.shape())?;
            values.insert(name.clone(), t.to_device(device)?);
        }
        if let Some((name, dims)) = self.inputs.iter().find(|(n, _)| !values.contains_key(n)) {
            return Err(Error::invalid(
                "onnx",
                format!(
                    "input `{name}` (dims {dims:?}) is not given; the graph's inputs: {}",
                    self.input_list()
                ),
            ));
        }
        for (i, def) in self.nodes.iter().enumerate() {
            crate::cancel::check()?;
            let inputs = def
                .inputs
                .iter()
                .map(|name| {
                    if name.is_empty() {
                        return Ok(None);
                    }
                    values.get(name).cloned().map(Some).ok_or_else(|| {
                        Error::format(
                            "onnx",
                            format!("{} node `{}` reads `{name}`, which no earlier node or initializer makes", def.op_type, def.name),
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let outputs = run_node(def, inputs, self.opset)?;
            for (name, t) in def.outputs.iter().zip(outputs) {
                if !name.is_empty() {
                    values.insert(name.clone(), t);
                }
            }
            for name in &def.inputs {
                if self.last_use.get(name) == Some(&i) {
                    values.remove(name);
                }
            }
        }
        self.outputs
            .iter()
            .map(|name| {
                let t = values.get(name).cloned().ok_or_else(|| {
                    Error::format("onnx", format!("output `{name}` is made by no node"))
                })?;
                Ok((name.clone(), t))
            })
            .collect()
    }

    fn input_list(&self) -> String {
        self.inputs
            .iter()
            .map(|(n, d)| format!("`{n}` {d:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Refuses a node whose domain or operator this runtime lacks, naming it.
fn check_node(node: &OnnxNode, opset: i64) -> Result<()> {
    if !(node.domain.is_empty() || node.domain == "ai.onnx") {
        return Err(Error::format(
            "onnx",
            format!(
                "{} node `{}` is from the `{}` domain; only the standard ai.onnx operators run",
                node.op_type, node.name, node.domain
            ),
        ));
    }
    if ops::lookup(&node.op_type).is_none() {
        return Err(Error::format(
            "onnx",
            format!(
                "operator {} (node `{}`, opset {opset}) is not supported; the supported ones: {}",
                node.op_type,
                node.name,
                ops::supported().join(", ")
            ),
        ));
    }
    Ok(())
}

fn run_node(def: &OnnxNode, inputs: Vec<Option<Tensor>>, opset: i64) -> Result<Vec<Tensor>> {
    let op = ops::lookup(&def.op_type).ok_or_else(|| {
        Error::format("onnx", format!("operator {} is not supported", def.op_type))
    })?;
    let node = Node { def, inputs, opset };
    let outputs = op(&node).map_err(|e| match e {
        e @ Error::Format { .. } => e,
        Error::Cancelled => Error::Cancelled,
        e => node.error(e),
    })?;
    let wanted = def.outputs.iter().filter(|n| !n.is_empty()).count();
    if outputs.len() < wanted.min(def.outputs.len()) {
        return Err(node.error(format!(
            "made {} outputs where the graph names {}",
            outputs.len(),
            def.outputs.len()
        )));
    }
    Ok(outputs)
}

/// Checks a fed tensor against the graph's declared dims (symbolic ones match anything).
fn check_dims(name: &str, declared: &[i64], shape: &[usize]) -> Result<()> {
    let fits = declared.is_empty()
        || declared.len() == shape.len()
            && declared
                .iter()
                .zip(shape)
                .all(|(&d, &s)| d < 0 || d as usize == s);
    if fits {
        Ok(())
    } else {
        Err(Error::invalid(
            "onnx",
            format!(
                "input `{name}` has shape {shape:?}; the graph declares {declared:?} (-1: any)"
            ),
        ))
    }
}

impl Module for OnnxGraph {
    /// One input, the first output.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let [(name, _)] = self.inputs.as_slice() else {
            return Err(Error::invalid(
                "onnx",
                format!(
                    "forward takes the graph's one input, but it has {}: {}; use run with a map",
                    self.inputs.len(),
                    self.input_list()
                ),
            ));
        };
        let mut out = self.run(&[(name.clone(), x.clone())])?;
        Ok(out.remove(0).1)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        self.weights.clone()
    }

    fn own_buffers(&self) -> Vec<(String, Tensor)> {
        self.buffers.clone()
    }

    fn is_training(&self) -> bool {
        self.training
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn set_training(&mut self, on: bool) {
        self.training = on;
    }

    fn title(&self) -> String {
        format!(
            "OnnxGraph(nodes={}, opset={}, inputs=[{}], outputs=[{}]{})",
            self.nodes.len(),
            self.opset,
            self.input_list(),
            self.outputs.join(", "),
            if self.producer.is_empty() {
                String::new()
            } else {
                format!(", producer={}", self.producer)
            }
        )
    }
}

#[cfg(test)]
mod tests;
