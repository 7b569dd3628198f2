//! Turns the pickle's object graph into an owned [`Value`] tree, loading tensors on the way.
//!
//! Objects that the graph shares appear once per reference in the tree (tensors share their
//! data); a reference back to an enclosing object becomes [`Value::Recursive`]. Two limits keep
//! a hostile file from exhausting memory or the stack: a nesting depth, and a total count of
//! values produced, which stops a small graph of repeated shared references from expanding
//! exponentially.

use super::pickle::{Id, Node, Vm};
use super::storage::{load_tensor, torch_error};
use super::value::Value;
use crate::{Result, Tensor};
use std::collections::{HashMap, HashSet};

/// Deepest nesting accepted; real checkpoints nest a few dozen levels.
const MAX_DEPTH: usize = 500;
/// Values produced at least, whatever the graph's size (more for larger graphs).
const MIN_VALUE_BUDGET: usize = 1_000_000;

/// Where the bytes of each storage come from.
pub(super) trait StorageSource {
    /// The bytes of root storage `key`.
    fn bytes(&mut self, key: &str) -> Result<&[u8]>;
}

/// For pickles that must not reference storages (the legacy format's header pickles).
pub(super) struct NoStorages<'a>(pub &'a str);

impl StorageSource for NoStorages<'_> {
    fn bytes(&mut self, key: &str) -> Result<&[u8]> {
        Err(torch_error(format!(
            "`{}`: unexpected storage `{key}` here",
            self.0
        )))
    }
}

pub(super) struct Materialiser<'v, 's> {
    vm: &'v Vm<'v>,
    source: &'s mut dyn StorageSource,
    budget: usize,
    /// Dict keys from the root to the current value, for naming tensors in errors.
    path: Vec<String>,
    tensors: HashMap<Id, Tensor>,
    /// Container nodes being expanded, from the root down: meeting one again is a cycle.
    open: HashSet<Id>,
}

impl<'v, 's> Materialiser<'v, 's> {
    pub(super) fn new(vm: &'v Vm<'v>, source: &'s mut dyn StorageSource) -> Self {
        Materialiser {
            vm,
            source,
            budget: MIN_VALUE_BUDGET.max(vm.arena.len().saturating_mul(4)),
            path: Vec::new(),
            tensors: HashMap::new(),
            open: HashSet::new(),
        }
    }

    pub(super) fn value(&mut self, id: Id) -> Result<Value> {
        self.value_at(id, 0)
    }

    fn value_at(&mut self, id: Id, depth: usize) -> Result<Value> {
        if depth > MAX_DEPTH {
            return Err(self
                .vm
                .error(format!("objects nest deeper than {MAX_DEPTH} levels")));
        }
        if !self.open.insert(id) {
            return Ok(Value::Recursive);
        }
        let value = self.expand(id, depth);
        self.open.remove(&id);
        value
    }

    fn expand(&mut self, id: Id, depth: usize) -> Result<Value> {
        self.budget = self.budget.checked_sub(1).ok_or_else(|| {
            self.vm
                .error("the object graph expands to too many values (shared references)")
        })?;
        let list = |m: &mut Self, items: &[Id]| -> Result<Vec<Value>> {
            items.iter().map(|&i| m.value_at(i, depth + 1)).collect()
        };
        Ok(match &self.vm.arena[id] {
            Node::Leaf(v) => v.clone(),
            Node::Global { name, .. } => Value::Global(name.clone()),
            Node::Tuple(items) => Value::Tuple(list(self, items)?),
            Node::List(items) => Value::List(list(self, items)?),
            Node::Set(items) => Value::Set(list(self, items)?),
            Node::Dict(entries) => {
                let mut out = Vec::with_capacity(entries.len());
                for &(k, v) in entries {
                    let key = self.value_at(k, depth + 1)?;
                    let named = path_component(&key);
                    if let Some(name) = &named {
                        self.path.push(name.clone());
                    }
                    let value = self.value_at(v, depth + 1);
                    if named.is_some() {
                        self.path.pop();
                    }
                    out.push((key, value?));
                }
                Value::Dict(out)
            }
            Node::Object { class, args, state } => Value::Object {
                class: class.clone(),
                args: list(self, args)?,
                state: Box::new(match state {
                    Some(s) => self.value_at(*s, depth + 1)?,
                    None => Value::None,
                }),
            },
            Node::Tensor(spec) => {
                if let Some(t) = self.tensors.get(&id) {
                    return Ok(Value::Tensor(t.clone()));
                }
                let path = self.path.join(".");
                let root = self.source.bytes(&spec.storage.key)?;
                let t = load_tensor(spec, root, self.vm.file, &path)?;
                self.tensors.insert(id, t.clone());
                Value::Tensor(t)
            }
            Node::Storage(s) => {
                return Err(self.vm.error(format!(
                    "a bare storage (`{}`) outside a tensor is not supported",
                    s.key
                )))
            }
            Node::NumpyDtype { code, .. } => Value::Global(format!("numpy.dtype({code})")),
        })
    }
}

/// How a dict key shows in a tensor's path; module plumbing keys are left out so that paths
/// read like state-dict names.
fn path_component(key: &Value) -> Option<String> {
    match key {
        Value::Str(s) if matches!(s.as_str(), "_modules" | "_parameters" | "_buffers") => None,
        Value::Str(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}
