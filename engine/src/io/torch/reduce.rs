//! What the allowed globals build when a pickle calls them (`REDUCE`, `NEWOBJ`), how `BUILD`
//! sets state, and how torch's persistent ids name storages. Everything built is inert data.

use super::globals::GlobalKind;
use super::pickle::{Id, Node, Step, Vm};
use super::storage::{StorageRef, TensorSpec};
use super::value::Value;

impl Vm<'_> {
    /// Calls the global `callable` with `args`; `newobj` when the pickle asked for `cls.__new__`.
    pub(super) fn call(&mut self, callable: Id, args: Vec<Id>, newobj: bool) -> Step<Id> {
        let (name, kind) = match &self.arena[callable] {
            Node::Global { name, kind } => (name.clone(), *kind),
            other => {
                return Err(format!(
                    "a {} is called; only globals may be",
                    node_kind(other)
                ))
            }
        };
        use GlobalKind::*;
        let is_class = matches!(kind, Class | OrderedDict | Set | FrozenSet);
        if newobj && !is_class {
            return Err(format!("NEWOBJ of `{name}`, which is not a class"));
        }
        let node = match kind {
            OrderedDict => Node::Dict(match args.first() {
                None => Vec::new(),
                Some(&items) => self.dict_pairs(items)?,
            }),
            RebuildTensorV2 if args.len() >= 6 => self.rebuild_tensor(&args)?,
            RebuildTensor if args.len() == 4 => self.rebuild_tensor(&args)?,
            RebuildTensorV2 | RebuildTensor => {
                return Err(format!("`{name}` with {} arguments", args.len()))
            }
            RebuildParameter => {
                let data = *args.first().ok_or("`_rebuild_parameter` without data")?;
                match &self.arena[data] {
                    Node::Tensor(_) => return Ok(data),
                    other => return Err(format!("parameter data is a {}", node_kind(other))),
                }
            }
            TorchSize => match args.as_slice() {
                [dims] => Node::Tuple(self.sequence(*dims)?),
                _ => return Err("`torch.Size` wants one tuple".into()),
            },
            TorchDevice => {
                let parts: Vec<String> = args
                    .iter()
                    .map(|&a| match &self.arena[a] {
                        Node::Leaf(Value::Str(s)) => Ok(s.clone()),
                        Node::Leaf(Value::Int(i)) => Ok(i.to_string()),
                        _ => Err("`torch.device` wants a name and an index".to_string()),
                    })
                    .collect::<Step<_>>()?;
                Node::Leaf(Value::Str(parts.join(":")))
            }
            Reconstructor => match args.as_slice() {
                [class, _base, _state] => self.new_object(*class, Vec::new())?,
                _ => return Err("`copyreg._reconstructor` wants 3 arguments".into()),
            },
            NewObj => match args.split_first() {
                Some((&class, rest)) => self.new_object(class, rest.to_vec())?,
                None => return Err("`copyreg.__newobj__` without a class".into()),
            },
            Set | FrozenSet => Node::Set(match args.first() {
                None => Vec::new(),
                Some(&items) => self.sequence(items)?,
            }),
            Bytes if args.is_empty() => Node::Leaf(Value::Bytes(Vec::new())),
            Bytes | CodecsEncode => Node::Leaf(Value::Bytes(self.encode(&args)?)),
            Getattr | Class => Node::Object {
                class: name,
                args,
                state: None,
            },
            NumpyScalar => Node::Leaf(self.numpy_scalar(&args)?),
            NumpyDtype => {
                let code = args
                    .first()
                    .and_then(|&a| self.text(a))
                    .ok_or("`numpy.dtype` wants a type code")?;
                Node::NumpyDtype { code, order: '=' }
            }
            Path => {
                let parts: Option<Vec<String>> = args.iter().map(|&a| self.text(a)).collect();
                let parts = parts.ok_or("a path with non-string parts")?;
                Node::Leaf(Value::Str(join_path(&parts)))
            }
            Storage(_) => return Err(format!("`{name}` is only used inside persistent ids")),
            Data => return Err(format!("`{name}` is data, not callable")),
        };
        Ok(self.push_node(node))
    }

    /// `BUILD`: gives `target` its pickled state.
    pub(super) fn build(&mut self, target: Id, state: Id) -> Step<()> {
        match &self.arena[target] {
            Node::Object { .. } => {
                let state = self.flatten_state(state)?;
                let existing = match &self.arena[target] {
                    Node::Object { state, .. } => *state,
                    _ => None,
                };
                // A second BUILD adds attributes, as `__dict__.update` would.
                if let Some(old) = existing {
                    if let (Node::Dict(_), Node::Dict(new)) = (&self.arena[old], &self.arena[state])
                    {
                        let new = new.clone();
                        self.charge_copies(new.len())?;
                        if let Node::Dict(entries) = &mut self.arena[old] {
                            entries.extend(new);
                        }
                        return Ok(());
                    }
                }
                if let Node::Object { state: slot, .. } = &mut self.arena[target] {
                    *slot = Some(state);
                }
                Ok(())
            }
            Node::NumpyDtype { .. } => {
                // numpy's dtype state is (version, byte order, ...).
                let order = match &self.arena[state] {
                    Node::Tuple(items) => items.get(1).and_then(|&o| self.text(o)),
                    _ => None,
                };
                let order = order
                    .and_then(|o| o.chars().next())
                    .ok_or("numpy dtype state without a byte order")?;
                if let Node::NumpyDtype { order: slot, .. } = &mut self.arena[target] {
                    *slot = order;
                }
                Ok(())
            }
            // An OrderedDict's attributes (a state dict's `_metadata`) and a tensor subclass'
            // state carry nothing a reader needs.
            Node::Dict(_) | Node::Tensor(_) | Node::Set(_) | Node::List(_) => Ok(()),
            other => Err(format!("BUILD on a {}", node_kind(other))),
        }
    }

    /// torch's persistent ids: `('storage', type, key, location, numel[, view])`, and legacy
    /// `('module', class, source_file, source)` for whole pickled modules.
    pub(super) fn persistent_load(&mut self, pid: Id) -> Step<Id> {
        let items = match &self.arena[pid] {
            Node::Tuple(items) => items.clone(),
            other => {
                return Err(format!(
                    "persistent id is a {}, not a tuple",
                    node_kind(other)
                ))
            }
        };
        let typename = items
            .first()
            .and_then(|&t| self.text(t))
            .ok_or("persistent id without a type name")?;
        match (typename.as_str(), items.as_slice()) {
            ("module", [_, class, ..]) => Ok(*class),
            ("storage", [_, storage_type, key, _location, numel, rest @ ..]) if rest.len() <= 1 => {
                let elem = match &self.arena[*storage_type] {
                    Node::Global {
                        kind: GlobalKind::Storage(elem),
                        ..
                    } => *elem,
                    other => return Err(format!("storage type is a {}", node_kind(other))),
                };
                let key = match &self.arena[*key] {
                    Node::Leaf(Value::Int(i)) => i.to_string(),
                    _ => self.text(*key).ok_or("storage key is not a string")?,
                };
                let numel = self.usize_at(*numel)?;
                let view = match rest.first().map(|&v| &self.arena[v]) {
                    None | Some(Node::Leaf(Value::None)) => None,
                    Some(Node::Tuple(v)) if v.len() == 3 => {
                        Some((self.usize_at(v[1])?, self.usize_at(v[2])?))
                    }
                    Some(_) => return Err("bad storage view metadata".into()),
                };
                Ok(self.push_node(Node::Storage(StorageRef {
                    key,
                    elem,
                    numel,
                    view,
                })))
            }
            (other, _) => Err(format!(
                "unsupported persistent id `{other}` with {} fields",
                items.len()
            )),
        }
    }

    fn rebuild_tensor(&mut self, args: &[Id]) -> Step<Node> {
        let storage = match &self.arena[args[0]] {
            Node::Storage(s) => s.clone(),
            other => return Err(format!("tensor storage is a {}", node_kind(other))),
        };
        let offset = self.usize_at(args[1])?;
        let size = self.usizes(args[2])?;
        let stride = self.usizes(args[3])?;
        Ok(Node::Tensor(TensorSpec {
            storage,
            offset,
            size,
            stride,
        }))
    }

    fn new_object(&mut self, class: Id, args: Vec<Id>) -> Step<Node> {
        match &self.arena[class] {
            Node::Global {
                name,
                kind: GlobalKind::Class,
            } => Ok(Node::Object {
                class: name.clone(),
                args,
                state: None,
            }),
            Node::Global { name, .. } => Err(format!("`{name}` is not a class that can be built")),
            other => Err(format!("object class is a {}", node_kind(other))),
        }
    }

    /// `(dict, slots)` state as one dict; any other state unchanged.
    fn flatten_state(&mut self, state: Id) -> Step<Id> {
        let Node::Tuple(items) = &self.arena[state] else {
            return Ok(state);
        };
        let [dict, slots] = items.as_slice() else {
            return Ok(state);
        };
        let mut merged = Vec::new();
        for &part in [dict, slots] {
            match &self.arena[part] {
                Node::Dict(entries) => merged.extend(entries.iter().copied()),
                Node::Leaf(Value::None) => {}
                _ => return Ok(state),
            }
        }
        self.charge_copies(merged.len())?;
        Ok(self.push_node(Node::Dict(merged)))
    }

    /// `_codecs.encode(text, encoding)`: how protocol 2 pickles Python 3 bytes.
    fn encode(&self, args: &[Id]) -> Step<Vec<u8>> {
        let (text, encoding) = match args {
            [t] => (self.text(*t), Some("utf-8".to_string())),
            [t, e] => (self.text(*t), self.text(*e)),
            _ => (None, None),
        };
        let (Some(text), Some(encoding)) = (text, encoding) else {
            return Err("bytes encoding wants (text, encoding)".into());
        };
        match encoding.to_ascii_lowercase().as_str() {
            "latin1" | "latin-1" | "iso-8859-1" => text
                .chars()
                .map(|c| u8::try_from(c as u32).map_err(|_| format!("`{c}` is not latin-1")))
                .collect(),
            "utf-8" | "utf8" | "ascii" => Ok(text.into_bytes()),
            other => Err(format!("unsupported bytes encoding `{other}`")),
        }
    }

    /// `numpy.core.multiarray.scalar(dtype, bytes)`: one number, as an int, float or bool.
    fn numpy_scalar(&self, args: &[Id]) -> Step<Value> {
        let [dtype, data] = args else {
            return Err("numpy scalar wants (dtype, bytes)".into());
        };
        let Node::NumpyDtype { code, order } = &self.arena[*dtype] else {
            return Err("numpy scalar without a dtype".into());
        };
        let mut bytes = match &self.arena[*data] {
            Node::Leaf(Value::Bytes(b)) => b.clone(),
            // A Python 2 str that happened to be UTF-8.
            Node::Leaf(Value::Str(s)) => s.as_bytes().to_vec(),
            _ => return Err("numpy scalar data is not bytes".into()),
        };
        let code = code.trim_start_matches(['<', '>', '|', '=']);
        if *order == '>' {
            bytes.reverse();
        }
        decode_numpy(code, &bytes)
            .ok_or_else(|| format!("numpy scalar `{code}` with {} bytes", bytes.len()))
    }

    fn dict_pairs(&mut self, items: Id) -> Step<Vec<(Id, Id)>> {
        self.sequence(items)?
            .into_iter()
            .map(|pair| match self.sequence(pair)?.as_slice() {
                [k, v] => Ok((*k, *v)),
                _ => Err("OrderedDict item is not a pair".to_string()),
            })
            .collect()
    }

    /// The items of a list, tuple or set node.
    fn sequence(&mut self, id: Id) -> Step<Vec<Id>> {
        let items = match &self.arena[id] {
            Node::List(v) | Node::Tuple(v) | Node::Set(v) => v.clone(),
            other => return Err(format!("expected a sequence, found a {}", node_kind(other))),
        };
        self.charge_copies(items.len())?;
        Ok(items)
    }

    pub(super) fn usize_at(&self, id: Id) -> Step<usize> {
        match &self.arena[id] {
            Node::Leaf(Value::Int(i)) => {
                usize::try_from(*i).map_err(|_| format!("negative size or index {i}"))
            }
            other => Err(format!("expected an int, found a {}", node_kind(other))),
        }
    }

    fn usizes(&mut self, id: Id) -> Step<Vec<usize>> {
        self.sequence(id)?
            .into_iter()
            .map(|i| self.usize_at(i))
            .collect()
    }

    /// A str node, or an ASCII bytes node (Python 2 strings read as bytes).
    pub(super) fn text(&self, id: Id) -> Option<String> {
        match &self.arena[id] {
            Node::Leaf(Value::Str(s)) => Some(s.clone()),
            Node::Leaf(Value::Bytes(b)) if b.is_ascii() => String::from_utf8(b.clone()).ok(),
            _ => None,
        }
    }
}

fn decode_numpy(code: &str, b: &[u8]) -> Option<Value> {
    fn arr<const N: usize>(b: &[u8]) -> Option<[u8; N]> {
        b.try_into().ok()
    }
    Some(match code {
        "f8" => Value::Float(f64::from_le_bytes(arr(b)?)),
        "f4" => Value::Float(f32::from_le_bytes(arr(b)?) as f64),
        "f2" => Value::Float(half::f16::from_le_bytes(arr(b)?).to_f64()),
        "i8" => Value::Int(i64::from_le_bytes(arr(b)?)),
        "i4" => Value::Int(i32::from_le_bytes(arr(b)?) as i64),
        "i2" => Value::Int(i16::from_le_bytes(arr(b)?) as i64),
        "i1" => Value::Int(i8::from_le_bytes(arr(b)?) as i64),
        "u8" => Value::Int(i64::try_from(u64::from_le_bytes(arr(b)?)).ok()?),
        "u4" => Value::Int(u32::from_le_bytes(arr(b)?) as i64),
        "u2" => Value::Int(u16::from_le_bytes(arr(b)?) as i64),
        "u1" => Value::Int(u8::from_le_bytes(arr(b)?) as i64),
        "b1" => Value::Bool(arr::<1>(b)?[0] != 0),
        _ => return None,
    })
}

fn join_path(parts: &[String]) -> String {
    let mut out = String::new();
    for part in parts {
        if !out.is_empty() && !out.ends_with('/') {
            out.push('/');
        }
        out.push_str(part);
    }
    out
}

pub(super) fn node_kind(node: &Node) -> &'static str {
    match node {
        Node::Leaf(v) => v.kind(),
        Node::Global { .. } => "global",
        Node::Tuple(_) => "tuple",
        Node::List(_) => "list",
        Node::Dict(_) => "dict",
        Node::Set(_) => "set",
        Node::Object { .. } => "object",
        Node::Storage(_) => "storage",
        Node::Tensor(_) => "tensor",
        Node::NumpyDtype { .. } => "numpy dtype",
    }
}
