//! Optimizer state as named tensors plus named scalars, so a checkpoint writer can put the
//! tensors in safetensors and the scalars in its JSON header. Loading reads through a
//! `StateReader`, which collects every missing, mis-shaped and unexpected entry and reports
//! them in one error before anything is changed.

use crate::nn::NameReport;
use crate::{Device, Result, Tensor};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, Default)]
pub struct OptimizerState {
    /// Which optimizer wrote it ("adamw", "sgd", "lion").
    pub kind: String,
    /// Per-parameter tensors, keyed `state.<param name>.<field>`. These are copies: training
    /// on after saving does not change them.
    pub tensors: BTreeMap<String, Tensor>,
    /// The step count, the learning rate and per-parameter step counts.
    pub scalars: BTreeMap<String, f64>,
}

impl OptimizerState {
    pub fn new(kind: &str) -> Self {
        OptimizerState {
            kind: kind.to_string(),
            ..Default::default()
        }
    }

    /// Stores an independent copy of `t` on the CPU, so later in-place updates do not reach
    /// the save and a checkpoint writer finds every tensor on the host.
    pub fn put_tensor(&mut self, key: String, t: &Tensor) -> Result<()> {
        let copy = if t.device() == Device::Cpu {
            t.contiguous_copy()?
        } else {
            t.to_device(Device::Cpu)?
        };
        self.tensors.insert(key, copy);
        Ok(())
    }
}

/// The key of one parameter's state field.
pub fn param_key(param: &str, field: &str) -> String {
    format!("state.{param}.{field}")
}

/// Reads entries out of an `OptimizerState`, remembering what went wrong instead of stopping at
/// the first problem, and which keys it used so `finish` can name the unexpected ones.
pub struct StateReader<'a> {
    state: &'a OptimizerState,
    used: BTreeSet<String>,
    problems: NameReport,
}

impl<'a> StateReader<'a> {
    pub fn new(state: &'a OptimizerState, kind: &str) -> Self {
        let mut problems = NameReport::new();
        if state.kind != kind {
            problems.problem(format!("state was saved by `{}`, not `{kind}`", state.kind));
        }
        StateReader {
            state,
            used: BTreeSet::new(),
            problems,
        }
    }

    pub fn has_scalar(&self, key: &str) -> bool {
        self.state.scalars.contains_key(key)
    }

    pub fn scalar(&mut self, key: &str) -> Option<f64> {
        self.used.insert(key.to_string());
        let v = self.state.scalars.get(key).copied();
        if v.is_none() {
            self.problems.missing(key);
        }
        v
    }

    /// A fresh copy of the tensor at `key`, checked against `shape`.
    pub fn tensor(&mut self, key: &str, shape: &[usize]) -> Option<Tensor> {
        self.used.insert(key.to_string());
        let Some(t) = self.state.tensors.get(key) else {
            self.problems.missing(key);
            return None;
        };
        if t.shape() != shape {
            self.problems.misshaped(key, t.shape(), shape);
            return None;
        }
        match t.contiguous_copy() {
            Ok(c) => Some(c),
            Err(e) => {
                self.problems.problem(format!("{key}: {e}"));
                None
            }
        }
    }

    /// Like `tensor`, but absence is fine (state that is created lazily).
    pub fn optional_tensor(&mut self, key: &str, shape: &[usize]) -> Option<Tensor> {
        if self.state.tensors.contains_key(key) {
            self.tensor(key, shape)
        } else {
            None
        }
    }

    /// Ok when every read succeeded and every entry was read.
    pub fn finish(self) -> Result<()> {
        let mut problems = self.problems;
        let entries = self.state.tensors.keys().chain(self.state.scalars.keys());
        for key in entries.filter(|k| !self.used.contains(*k)) {
            problems.unexpected(key);
        }
        problems.into_result("optimizer state")
    }
}
