//! The inert values a torch pickle decodes to.
//!
//! Nothing here can run code: a pickled class instance is an [`Value::Object`] that only records
//! its class name, its constructor arguments and the state that `BUILD` gave it.

use crate::Tensor;

/// A decoded pickle value.
#[derive(Clone, Debug)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer beyond `i64`, as little-endian two's-complement bytes (pickle's `LONG1` form).
    BigInt(Vec<u8>),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    /// A dict or `OrderedDict`, in insertion order; keys may be any value (often str or int).
    Dict(Vec<(Value, Value)>),
    Set(Vec<Value>),
    Tensor(Tensor),
    /// A reference to an allow-listed global that was not called, e.g. `torch.float16`.
    Global(String),
    /// An instance of an allow-listed class (an `nn.Module`, a namespace, ...): its class as
    /// `module.Name`, the arguments it was created with, and its `BUILD` state (its `__dict__`
    /// for most classes), `Value::None` when it had none.
    Object {
        class: String,
        args: Vec<Value>,
        state: Box<Value>,
    },
    /// A reference back to an object that encloses it (a cycle in the pickled graph), which a
    /// tree of values cannot hold; it is left unexpanded.
    Recursive,
}

impl Value {
    /// The value under string key `key`: a dict entry, or an object's attribute. For an
    /// `nn.Module` object this also finds submodules, parameters and buffers, as Python's
    /// attribute lookup does.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items
                .iter()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v),
            Value::Object { state, .. } => state.get(key).or_else(|| {
                ["_modules", "_parameters", "_buffers"]
                    .iter()
                    .find_map(|field| state.get(field)?.get(key))
            }),
            _ => None,
        }
    }

    /// The value under integer key `key` of a dict, e.g. a class id in `names`.
    pub fn get_int(&self, key: i64) -> Option<&Value> {
        self.as_dict_items()?
            .iter()
            .find(|(k, _)| matches!(k, Value::Int(i) if *i == key))
            .map(|(_, v)| v)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    /// A float, or an int widened to one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    pub fn as_dict_items(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Dict(items) => Some(items),
            _ => None,
        }
    }

    /// The items of a list or a tuple.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(items) | Value::Tuple(items) => Some(items),
            _ => None,
        }
    }

    /// The class of an object, as `module.Name`.
    pub fn class_name(&self) -> Option<&str> {
        match self {
            Value::Object { class, .. } => Some(class),
            _ => None,
        }
    }

    /// A short name of the value's kind, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::Tuple(_) => "tuple",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Set(_) => "set",
            Value::Tensor(_) => "tensor",
            Value::Global(_) => "global",
            Value::Object { .. } => "object",
            Value::Recursive => "recursive reference",
        }
    }
}
