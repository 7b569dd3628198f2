//! One node as an operator sees it: its inputs (resolved to tensors), its attributes with
//! ONNX's defaults, and the opset it was written for. Every error names the node.

use crate::io::onnx::{OnnxAttribute, OnnxNode};
use crate::{DType, Device, Error, Result, Tensor};

pub struct Node<'a> {
    pub def: &'a OnnxNode,
    /// The node's inputs in order; `None` where the name is empty (an omitted optional input).
    pub inputs: Vec<Option<Tensor>>,
    /// The default domain's opset the model imports.
    pub opset: i64,
}

impl Node<'_> {
    /// An error about this node's inputs or attributes.
    pub fn error(&self, msg: impl std::fmt::Display) -> Error {
        Error::format("onnx", format!("{}: {msg}", self.describe()))
    }

    /// `Conv node "conv1" (opset 17)`: how errors name the node.
    pub fn describe(&self) -> String {
        format!(
            "{} node `{}` (opset {})",
            self.def.op_type, self.def.name, self.opset
        )
    }

    /// Input `i`, which the operator requires.
    pub fn input(&self, i: usize) -> Result<&Tensor> {
        self.opt_input(i)
            .ok_or_else(|| self.error(format!("input {i} is required but missing")))
    }

    /// Input `i`, when given.
    pub fn opt_input(&self, i: usize) -> Option<&Tensor> {
        self.inputs.get(i).and_then(Option::as_ref)
    }

    /// Every input, each required (variadic operators: Concat, Sum, Max, ...).
    pub fn all_inputs(&self) -> Result<Vec<Tensor>> {
        (0..self.inputs.len())
            .map(|i| self.input(i).cloned())
            .collect()
    }

    fn attribute(&self, name: &str) -> Option<&OnnxAttribute> {
        self.def.attribute(name)
    }

    fn wrong_kind(&self, name: &str, want: &str) -> Error {
        self.error(format!("attribute `{name}` should be {want}"))
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64> {
        match self.attribute(name) {
            None => Ok(default),
            Some(OnnxAttribute::Int(v)) => Ok(*v),
            Some(_) => Err(self.wrong_kind(name, "an int")),
        }
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32> {
        match self.attribute(name) {
            None => Ok(default),
            Some(OnnxAttribute::Float(v)) => Ok(*v),
            Some(_) => Err(self.wrong_kind(name, "a float")),
        }
    }

    pub fn string(&self, name: &str, default: &str) -> Result<String> {
        match self.attribute(name) {
            None => Ok(default.to_string()),
            Some(OnnxAttribute::String(v)) => Ok(String::from_utf8_lossy(v).into_owned()),
            Some(_) => Err(self.wrong_kind(name, "a string")),
        }
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.attribute(name) {
            None => Ok(None),
            Some(OnnxAttribute::Ints(v)) => Ok(Some(v.clone())),
            Some(OnnxAttribute::Int(v)) => Ok(Some(vec![*v])),
            Some(_) => Err(self.wrong_kind(name, "a list of ints")),
        }
    }

    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>> {
        match self.attribute(name) {
            None => Ok(None),
            Some(OnnxAttribute::Floats(v)) => Ok(Some(v.clone())),
            Some(OnnxAttribute::Float(v)) => Ok(Some(vec![*v])),
            Some(_) => Err(self.wrong_kind(name, "a list of floats")),
        }
    }

    pub fn tensor_attr(&self, name: &str) -> Result<Option<Tensor>> {
        match self.attribute(name) {
            None => Ok(None),
            Some(OnnxAttribute::Tensor(t)) => Ok(Some(t.clone())),
            Some(_) => Err(self.wrong_kind(name, "a tensor")),
        }
    }

    /// Whether the node carries attribute `name`.
    pub fn has(&self, name: &str) -> bool {
        self.attribute(name).is_some()
    }

    /// Refuses an attribute value this runtime does not implement, rather than ignore it.
    pub fn require(&self, ok: bool, what: impl std::fmt::Display) -> Result<()> {
        if ok {
            Ok(())
        } else {
            Err(self.error(format!("{what} is not supported")))
        }
    }

    /// The values of input `i` on the host as integers (shapes, axes, pads, slice bounds).
    pub fn host_ints(&self, i: usize) -> Result<Vec<i64>> {
        host_ints(self.input(i)?)
    }

    /// Input `i` as host integers when given.
    pub fn opt_host_ints(&self, i: usize) -> Result<Option<Vec<i64>>> {
        self.opt_input(i).map(host_ints).transpose()
    }

    /// The values of input `i` on the host as floats (Resize's scales, Clip's bounds).
    pub fn host_floats(&self, i: usize) -> Result<Option<Vec<f64>>> {
        self.opt_input(i).map(|t| t.to_vec_f64()).transpose()
    }

    /// An axis attribute or value, negative from the end, checked against `rank`.
    pub fn axis(&self, axis: i64, rank: usize) -> Result<usize> {
        let r = rank as i64;
        if axis < -r || axis >= r.max(1) {
            return Err(self.error(format!("axis {axis} is out of range for rank {rank}")));
        }
        Ok(if axis < 0 { axis + r } else { axis } as usize)
    }
}

/// A tensor's values as integers on the host.
pub fn host_ints(t: &Tensor) -> Result<Vec<i64>> {
    if t.dtype() == DType::I64 {
        t.to_vec::<i64>()
    } else {
        Ok(t.to_vec_f64()?.into_iter().map(|v| v as i64).collect())
    }
}

/// A 1-D I64 tensor on the CPU: what Shape and the shape arithmetic after it produce, kept on
/// the host so reading it back never waits on the device.
pub fn host_tensor(values: &[i64]) -> Result<Tensor> {
    Tensor::from_slice(values, &[values.len()])
}

/// The tensors moved to one device: the first one not on the CPU, if any. Shape arithmetic
/// lives on the host; it meets the data where the graph computes.
pub fn colocate(ts: &[Tensor]) -> Result<Vec<Tensor>> {
    let Some(device) = ts.iter().map(Tensor::device).find(|d| *d != Device::Cpu) else {
        return Ok(ts.to_vec());
    };
    ts.iter()
        .map(|t| {
            if t.device() == device {
                Ok(t.clone())
            } else {
                t.to_device(device)
            }
        })
        .collect()
}

/// The first two inputs of `n`, on one device (binary operators).
pub fn input_pair(n: &Node) -> Result<[Tensor; 2]> {
    let t = colocate(&[n.input(0)?.clone(), n.input(1)?.clone()])?;
    Ok([t[0].clone(), t[1].clone()])
}

/// Indices counted from the end (-1 the last) made plain, as i64: i + size where i < 0. Gather,
/// GatherElements, ScatterElements and OneHot all accept them.
pub fn wrap_negative(index: &Tensor, size: usize) -> Result<Tensor> {
    let index = index.to_dtype(DType::I64)?;
    if index.device() == Device::Cpu {
        let v = index.to_vec::<i64>()?;
        if v.iter().all(|&i| i >= 0) {
            return Ok(index);
        }
        let fixed: Vec<i64> = v
            .iter()
            .map(|&i| if i < 0 { i + size as i64 } else { i })
            .collect();
        return Tensor::from_vec(fixed, index.shape());
    }
    Tensor::where_cond(
        &index.lt_scalar(0.0)?,
        &index.add_scalar(size as f64)?,
        &index,
    )
}
