//! A pickle writer for `torch.save` files: protocol 2, as `torch.save` writes by default.
//!
//! The object to write is a [`PyObject`] tree: Python data, tensors, and class instances made
//! the way Python's pickler makes them for classes without their own `__reduce__` (`NEWOBJ`
//! with no arguments, then `BUILD` with the instance's `__dict__`). Tensors are written as
//! `torch._utils._rebuild_tensor_v2` over a storage that the pickle names by persistent id
//! `('storage', torch.<Type>Storage, key, 'cpu', numel)`; the storage's bytes are collected
//! here for the container ([`super::save`]) to write as `data/<key>`.

use super::storage::torch_error;
use crate::backend::Storage;
use crate::{no_grad, DType, Device, Result, Tensor};
use std::collections::HashMap;

/// A Python object to pickle.
#[derive(Clone, Debug)]
pub enum PyObject {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    Tuple(Vec<PyObject>),
    List(Vec<PyObject>),
    /// A `dict`, in insertion order.
    Dict(Vec<(PyObject, PyObject)>),
    /// A `collections.OrderedDict`.
    OrderedDict(Vec<(PyObject, PyObject)>),
    Set(Vec<PyObject>),
    /// A plain tensor (`requires_grad` false), written contiguous in its own dtype.
    Tensor(Tensor),
    /// A `torch.nn.Parameter` over `data`.
    Parameter {
        data: Tensor,
        requires_grad: bool,
    },
    /// A reference to `module.name`, uncalled (a class, a function, `torch.float16`).
    Global {
        module: String,
        name: String,
    },
    /// `module.name(*args)`, pickled with `REDUCE`.
    Call {
        module: String,
        name: String,
        args: Vec<PyObject>,
    },
    /// An instance of class `module.name` created without arguments and given `state` (its
    /// `__dict__`, a dict of attribute names to values) by `BUILD`.
    Object {
        module: String,
        name: String,
        state: Box<PyObject>,
    },
}

impl PyObject {
    pub fn str(s: impl Into<String>) -> PyObject {
        PyObject::Str(s.into())
    }

    /// A dict with string keys.
    pub fn str_dict<K: Into<String>>(items: impl IntoIterator<Item = (K, PyObject)>) -> PyObject {
        PyObject::Dict(
            items
                .into_iter()
                .map(|(k, v)| (PyObject::Str(k.into()), v))
                .collect(),
        )
    }

    /// `None` for `None`, else the value.
    pub fn option(v: Option<PyObject>) -> PyObject {
        v.unwrap_or(PyObject::None)
    }
}

/// One storage of the archive: its key, and its bytes in torch's layout (little-endian).
pub(super) struct StorageRecord {
    pub key: String,
    pub bytes: Vec<u8>,
}

/// The pickle bytes of an object and the storages its tensors reference.
pub(super) struct Pickled {
    pub pickle: Vec<u8>,
    pub storages: Vec<StorageRecord>,
}

/// Pickles `obj` at protocol 2.
pub(super) fn pickle(obj: &PyObject) -> Result<Pickled> {
    let mut p = Pickler::default();
    p.out.extend_from_slice(&[PROTO, 2]);
    p.object(obj)?;
    p.out.push(STOP);
    Ok(Pickled {
        pickle: p.out,
        storages: p.storages,
    })
}

// The opcodes of protocol 2 that this writer emits.
const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const NONE: u8 = b'N';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const LONG1: u8 = 0x8a;
const BINFLOAT: u8 = b'G';
const BINUNICODE: u8 = b'X';
const MARK: u8 = b'(';
const EMPTY_TUPLE: u8 = b')';
const TUPLE: u8 = b't';
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const TUPLE3: u8 = 0x87;
const EMPTY_LIST: u8 = b']';
const APPENDS: u8 = b'e';
const EMPTY_DICT: u8 = b'}';
const SETITEMS: u8 = b'u';
const GLOBAL: u8 = b'c';
const REDUCE: u8 = b'R';
const NEWOBJ: u8 = 0x81;
const BUILD: u8 = b'b';
const BINPERSID: u8 = b'Q';
const BINPUT: u8 = b'q';
const LONG_BINPUT: u8 = b'r';
const BINGET: u8 = b'h';
const LONG_BINGET: u8 = b'j';

/// Python's pickler appends and sets items in batches of this many.
const BATCH: usize = 1000;

#[derive(Default)]
struct Pickler {
    out: Vec<u8>,
    storages: Vec<StorageRecord>,
    /// Memo slots of the globals written so far: each is written once, then fetched.
    globals: HashMap<(String, String), u32>,
    memo_len: u32,
}

impl Pickler {
    fn object(&mut self, obj: &PyObject) -> Result<()> {
        match obj {
            PyObject::None => self.out.push(NONE),
            PyObject::Bool(b) => self.out.push(if *b { NEWTRUE } else { NEWFALSE }),
            PyObject::Int(i) => self.int(*i),
            PyObject::Float(f) => {
                self.out.push(BINFLOAT);
                self.out.extend_from_slice(&f.to_be_bytes());
            }
            PyObject::Str(s) => self.unicode(s)?,
            // Protocol 2 has no bytes opcode: Python 3 writes `_codecs.encode(text, 'latin1')`.
            PyObject::Bytes(b) => {
                let text: String = b.iter().map(|&c| c as char).collect();
                self.global("_codecs", "encode")?;
                self.unicode(&text)?;
                self.unicode("latin1")?;
                self.out.extend_from_slice(&[TUPLE2, REDUCE]);
            }
            PyObject::Tuple(items) => self.tuple(items)?,
            PyObject::List(items) => {
                self.out.push(EMPTY_LIST);
                for chunk in items.chunks(BATCH) {
                    self.out.push(MARK);
                    for item in chunk {
                        self.object(item)?;
                    }
                    self.out.push(APPENDS);
                }
            }
            PyObject::Dict(items) => {
                self.out.push(EMPTY_DICT);
                self.set_items(items)?;
            }
            // OrderedDict's reduce: the class called without arguments, then its items.
            PyObject::OrderedDict(items) => {
                self.global("collections", "OrderedDict")?;
                self.out.extend_from_slice(&[EMPTY_TUPLE, REDUCE]);
                self.set_items(items)?;
            }
            PyObject::Set(items) => {
                self.global("builtins", "set")?;
                self.out.push(EMPTY_LIST);
                if !items.is_empty() {
                    self.out.push(MARK);
                    for item in items {
                        self.object(item)?;
                    }
                    self.out.push(APPENDS);
                }
                self.out.extend_from_slice(&[TUPLE1, REDUCE]);
            }
            PyObject::Tensor(t) => self.tensor(t)?,
            PyObject::Parameter {
                data,
                requires_grad,
            } => {
                self.global("torch._utils", "_rebuild_parameter")?;
                self.tensor(data)?;
                self.out
                    .push(if *requires_grad { NEWTRUE } else { NEWFALSE });
                self.empty_ordered_dict()?;
                self.out.extend_from_slice(&[TUPLE3, REDUCE]);
            }
            PyObject::Global { module, name } => self.global(module, name)?,
            PyObject::Call { module, name, args } => {
                self.global(module, name)?;
                self.tuple(args)?;
                self.out.push(REDUCE);
            }
            PyObject::Object {
                module,
                name,
                state,
            } => {
                self.global(module, name)?;
                self.out.extend_from_slice(&[EMPTY_TUPLE, NEWOBJ]);
                self.object(state)?;
                self.out.push(BUILD);
            }
        }
        Ok(())
    }

    /// The smallest integer opcode that holds `i`, as Python's pickler picks it.
    fn int(&mut self, i: i64) {
        if (0..=0xff).contains(&i) {
            self.out.extend_from_slice(&[BININT1, i as u8]);
        } else if (0..=0xffff).contains(&i) {
            self.out.push(BININT2);
            self.out.extend_from_slice(&(i as u16).to_le_bytes());
        } else if let Ok(v) = i32::try_from(i) {
            self.out.push(BININT);
            self.out.extend_from_slice(&v.to_le_bytes());
        } else {
            // LONG1: the shortest little-endian two's-complement form.
            let bytes = i.to_le_bytes();
            let mut n = 8;
            while n > 1 {
                let (top, next) = (bytes[n - 1], bytes[n - 2]);
                let redundant = (top == 0 && next & 0x80 == 0) || (top == 0xff && next & 0x80 != 0);
                if !redundant {
                    break;
                }
                n -= 1;
            }
            self.out.extend_from_slice(&[LONG1, n as u8]);
            self.out.extend_from_slice(&bytes[..n]);
        }
    }

    fn unicode(&mut self, s: &str) -> Result<()> {
        let n = u32::try_from(s.len())
            .map_err(|_| torch_error(format!("a string of {} bytes is too long", s.len())))?;
        self.out.push(BINUNICODE);
        self.out.extend_from_slice(&n.to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        Ok(())
    }

    fn tuple(&mut self, items: &[PyObject]) -> Result<()> {
        if items.is_empty() {
            self.out.push(EMPTY_TUPLE);
            return Ok(());
        }
        if items.len() > 3 {
            self.out.push(MARK);
        }
        for item in items {
            self.object(item)?;
        }
        self.out.push(match items.len() {
            1 => TUPLE1,
            2 => TUPLE2,
            3 => TUPLE3,
            _ => TUPLE,
        });
        Ok(())
    }

    /// `SETITEMS` of `items` onto the dict on top of the stack.
    fn set_items(&mut self, items: &[(PyObject, PyObject)]) -> Result<()> {
        for chunk in items.chunks(BATCH) {
            self.out.push(MARK);
            for (k, v) in chunk {
                self.object(k)?;
                self.object(v)?;
            }
            self.out.push(SETITEMS);
        }
        Ok(())
    }

    fn empty_ordered_dict(&mut self) -> Result<()> {
        self.global("collections", "OrderedDict")?;
        self.out.extend_from_slice(&[EMPTY_TUPLE, REDUCE]);
        Ok(())
    }

    /// `GLOBAL` the first time (memoized), `BINGET` after. Protocol 2 names Python 3's
    /// `builtins` by its Python 2 name, as Python's pickler does (`fix_imports`).
    fn global(&mut self, module: &str, name: &str) -> Result<()> {
        let bad = |s: &str| s.is_empty() || s.contains('\n');
        if bad(module) || bad(name) {
            return Err(torch_error(format!(
                "`{module}.{name}` is not a global a pickle can name"
            )));
        }
        let key = (module.to_string(), name.to_string());
        if let Some(&slot) = self.globals.get(&key) {
            if slot < 256 {
                self.out.extend_from_slice(&[BINGET, slot as u8]);
            } else {
                self.out.push(LONG_BINGET);
                self.out.extend_from_slice(&slot.to_le_bytes());
            }
            return Ok(());
        }
        let py2_module = match module {
            "builtins" => "__builtin__",
            "copyreg" => "copy_reg",
            m => m,
        };
        self.out.push(GLOBAL);
        self.out.extend_from_slice(py2_module.as_bytes());
        self.out.push(b'\n');
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(b'\n');
        let slot = self.memo_len;
        self.memo_len += 1;
        if slot < 256 {
            self.out.extend_from_slice(&[BINPUT, slot as u8]);
        } else {
            self.out.push(LONG_BINPUT);
            self.out.extend_from_slice(&slot.to_le_bytes());
        }
        self.globals.insert(key, slot);
        Ok(())
    }

    /// `_rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())` over a new storage
    /// holding the tensor's elements, contiguous.
    fn tensor(&mut self, t: &Tensor) -> Result<()> {
        let storage_type = storage_type(t.dtype())?;
        let bytes = contiguous_bytes(t)?;
        let key = self.storages.len().to_string();
        let numel = t.numel();
        self.global("torch._utils", "_rebuild_tensor_v2")?;
        self.out.push(MARK);
        // The persistent id.
        self.out.push(MARK);
        self.unicode("storage")?;
        self.global("torch", storage_type)?;
        self.unicode(&key)?;
        self.unicode("cpu")?;
        self.int(numel as i64);
        self.out.extend_from_slice(&[TUPLE, BINPERSID]);
        self.int(0);
        let dims: Vec<PyObject> = t.dims().iter().map(|&d| PyObject::Int(d as i64)).collect();
        self.tuple(&dims)?;
        let strides: Vec<PyObject> = contiguous_strides(t.dims())
            .into_iter()
            .map(|s| PyObject::Int(s as i64))
            .collect();
        self.tuple(&strides)?;
        self.out.push(NEWFALSE);
        self.empty_ordered_dict()?;
        self.out.extend_from_slice(&[TUPLE, REDUCE]);
        self.storages.push(StorageRecord { key, bytes });
        Ok(())
    }
}

/// The legacy storage class torch pickles for each dtype.
fn storage_type(dtype: DType) -> Result<&'static str> {
    Ok(match dtype {
        DType::F16 => "HalfStorage",
        DType::BF16 => "BFloat16Storage",
        DType::F32 => "FloatStorage",
        DType::F64 => "DoubleStorage",
        DType::I64 => "LongStorage",
        DType::U8 => "ByteStorage",
        DType::Bool => "BoolStorage",
        other => {
            return Err(torch_error(format!(
                "torch checkpoints have no {other} storage; cast the tensor first"
            )))
        }
    })
}

/// Row-major strides of a contiguous tensor of shape `dims`.
fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * dims[d + 1];
    }
    strides
}

/// The tensor's elements in row-major order as little-endian bytes, from any device.
fn contiguous_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let host = no_grad(|| t.detach().to_device(Device::Cpu)?.contiguous())?;
    let range = host
        .layout()
        .contiguous_range()
        .ok_or_else(|| torch_error("a contiguous copy is not contiguous"))?;
    let size = host.dtype().size_in_bytes();
    let storage = host.storage();
    match &*storage {
        Storage::Cpu(s) => Ok(s.as_bytes()[range.start * size..range.end * size].to_vec()),
        Storage::Cuda(_) => Err(torch_error("a tensor moved to the host is still on a GPU")),
    }
}
