//! Writing a GGUF file (version 3, little-endian), the layout `reader` describes: the header,
//! the key/values in the order they were added, the tensor infos, padding to the alignment,
//! and each tensor's bytes at an offset that is a multiple of the alignment.
//!
//! `general.alignment` is always written (32 unless changed), so a reader never has to assume
//! the default. Tensors are held in memory until `write`, which writes a temporary file beside
//! the target and renames it over the target, so a failed export leaves no half a file.

use super::ggml_type::GgmlType;
use super::metadata::{Array, Value};
use super::quantize::quantize;
use super::reader::GgufFile;
use crate::io::temp_file::TempFile;
use crate::{Error, Result};
use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

const MAGIC: &[u8; 4] = b"GGUF";
const VERSION: u32 = 3;
pub const DEFAULT_ALIGNMENT: u64 = 32;
const MAX_DIMS: usize = 4;
const OP: &str = "gguf write";

struct PendingTensor {
    name: String,
    /// ggml's order: innermost first.
    dims: Vec<u64>,
    ggml_type: GgmlType,
    bytes: Vec<u8>,
}

/// A GGUF file being assembled.
pub struct GgufWriter {
    alignment: u64,
    metadata: Vec<(String, Value)>,
    keys: HashSet<String>,
    tensors: Vec<PendingTensor>,
    names: HashSet<String>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        GgufWriter {
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            keys: HashSet::new(),
            tensors: Vec::new(),
            names: HashSet::new(),
        }
    }

    /// A writer holding `source`'s tensors (their stored bytes) and the metadata `keep` says
    /// yes to, in the file's order (`general.alignment` is the writer's own): a file to edit,
    /// e.g. with its tokenizer replaced.
    pub fn copy_of<R: std::io::Read + std::io::Seek>(
        source: &mut GgufFile<R>,
        keep: impl Fn(&str) -> bool,
    ) -> Result<GgufWriter> {
        let mut w = GgufWriter::new();
        for key in source.metadata.keys() {
            if key != "general.alignment" && keep(key) {
                if let Some(value) = source.metadata.get(key) {
                    w.add(key, value.clone())?;
                }
            }
        }
        for info in source.tensors.clone() {
            let bytes = source.raw(&info.name)?;
            w.add_raw_tensor(&info.name, &info.shape(), info.ggml_type, bytes)?;
        }
        Ok(w)
    }

    /// A power-of-two alignment other than 32 (for tests of readers).
    pub fn set_alignment(&mut self, alignment: u64) -> Result<()> {
        if !alignment.is_power_of_two() || !alignment.is_multiple_of(8) {
            return Err(Error::invalid(
                OP,
                format!("alignment {alignment} is not a power of two and a multiple of 8"),
            ));
        }
        self.alignment = alignment;
        Ok(())
    }

    /// Adds `key`; a key added twice or `general.alignment` (the writer's own) is an error.
    pub fn add(&mut self, key: &str, value: Value) -> Result<()> {
        if key == "general.alignment" {
            return Err(Error::invalid(
                OP,
                "general.alignment is written by the writer itself; use set_alignment",
            ));
        }
        if !self.keys.insert(key.to_string()) {
            return Err(Error::invalid(
                OP,
                format!("metadata key {key:?} added twice"),
            ));
        }
        self.metadata.push((key.to_string(), value));
        Ok(())
    }

    /// Adds a tensor of row-major `shape` whose stored bytes are `bytes`, already in
    /// `ggml_type` (their length is checked against the shape).
    pub fn add_raw_tensor(
        &mut self,
        name: &str,
        shape: &[usize],
        ggml_type: GgmlType,
        bytes: Vec<u8>,
    ) -> Result<()> {
        let what = format!("tensor {name:?}");
        if shape.is_empty() || shape.len() > MAX_DIMS {
            return Err(Error::invalid(
                OP,
                format!("{what}: shape {shape:?} (ggml tensors have 1 to {MAX_DIMS} dims)"),
            ));
        }
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        let rows: u64 = dims[1..].iter().product();
        let expected = ggml_type
            .row_bytes(dims[0])
            .map(|r| r * rows)
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!(
                        "{what}: rows of {} values are not whole {ggml_type} blocks of {}",
                        dims[0], ggml_type.block_size
                    ),
                )
            })?;
        if bytes.len() as u64 != expected {
            return Err(Error::invalid(
                OP,
                format!(
                    "{what}: {} bytes given, shape {shape:?} of {ggml_type} takes {expected}",
                    bytes.len()
                ),
            ));
        }
        if !self.names.insert(name.to_string()) {
            return Err(Error::invalid(OP, format!("{what} added twice")));
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            dims,
            ggml_type,
            bytes,
        });
        Ok(())
    }

    /// Adds f32 `values` of row-major `shape`, stored as `ggml_type` (quantized here).
    pub fn add_tensor(
        &mut self,
        name: &str,
        shape: &[usize],
        values: &[f32],
        ggml_type: GgmlType,
    ) -> Result<()> {
        let n: usize = shape.iter().product();
        if n != values.len() {
            return Err(Error::invalid(
                OP,
                format!(
                    "tensor {name:?}: {} values for shape {shape:?}",
                    values.len()
                ),
            ));
        }
        let inner = shape.last().copied().unwrap_or(0) as u64;
        if !inner.is_multiple_of(ggml_type.block_size) {
            return Err(Error::invalid(
                OP,
                format!(
                    "tensor {name:?}: rows of {inner} values are not whole {ggml_type} blocks of {}",
                    ggml_type.block_size
                ),
            ));
        }
        let bytes = quantize(ggml_type, values)
            .map_err(|e| Error::invalid(OP, format!("tensor {name:?}: {e}")))?;
        self.add_raw_tensor(name, shape, ggml_type, bytes)
    }

    /// The whole file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_to(&mut out)
            .unwrap_or_else(|_| unreachable!("writing to a Vec cannot fail"));
        out
    }

    /// Writes the file to `path` (atomically: a temporary beside it, then a rename).
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        crate::io::temp_file::create_parent(path)?;
        let tmp = TempFile::beside(path);
        let file = std::fs::File::create(tmp.path()).map_err(|e| Error::io(tmp.path(), e))?;
        let mut w = std::io::BufWriter::new(file);
        self.write_to(&mut w)
            .and_then(|_| w.flush())
            .map_err(|e| Error::io(tmp.path(), e))?;
        drop(w);
        tmp.persist(path)
    }

    fn write_to(&self, w: &mut impl Write) -> std::io::Result<()> {
        w.write_all(MAGIC)?;
        w.write_all(&VERSION.to_le_bytes())?;
        w.write_all(&(self.tensors.len() as u64).to_le_bytes())?;
        w.write_all(&(self.metadata.len() as u64 + 1).to_le_bytes())?;
        let mut pos = 4 + 4 + 8 + 8;
        let mut header = Vec::new();
        write_kv(
            &mut header,
            "general.alignment",
            &Value::U32(self.alignment as u32),
        );
        for (k, v) in &self.metadata {
            write_kv(&mut header, k, v);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            write_string(&mut header, &t.name);
            header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                header.extend_from_slice(&d.to_le_bytes());
            }
            header.extend_from_slice(&t.ggml_type.code.to_le_bytes());
            header.extend_from_slice(&offset.to_le_bytes());
            offset = (offset + t.bytes.len() as u64).next_multiple_of(self.alignment);
        }
        pos += header.len() as u64;
        w.write_all(&header)?;
        let pad = |w: &mut dyn Write, pos: &mut u64, align: u64| -> std::io::Result<()> {
            let to = pos.next_multiple_of(align);
            w.write_all(&vec![0u8; (to - *pos) as usize])?;
            *pos = to;
            Ok(())
        };
        pad(w, &mut pos, self.alignment)?;
        for t in &self.tensors {
            w.write_all(&t.bytes)?;
            pos += t.bytes.len() as u64;
            pad(w, &mut pos, self.alignment)?;
        }
        Ok(())
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_kv(out: &mut Vec<u8>, key: &str, v: &Value) {
    write_string(out, key);
    out.extend_from_slice(&value_code(v).to_le_bytes());
    write_value(out, v);
}

fn value_code(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn array_code(a: &Array) -> u32 {
    match a {
        Array::U8(_) => 0,
        Array::I8(_) => 1,
        Array::U16(_) => 2,
        Array::I16(_) => 3,
        Array::U32(_) => 4,
        Array::I32(_) => 5,
        Array::F32(_) => 6,
        Array::Bool(_) => 7,
        Array::String(_) => 8,
        Array::Array(_) => 9,
        Array::U64(_) => 10,
        Array::I64(_) => 11,
        Array::F64(_) => 12,
    }
}

fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => write_string(out, s),
        Value::Array(a) => write_array(out, a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn write_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&array_code(a).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    fn each<T>(out: &mut Vec<u8>, v: &[T], f: impl Fn(&T) -> Vec<u8>) {
        for x in v {
            out.extend_from_slice(&f(x));
        }
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => each(out, v, |x| vec![*x as u8]),
        Array::U16(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::I16(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::U32(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::I32(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::F32(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::Bool(v) => each(out, v, |x| vec![*x as u8]),
        Array::String(v) => v.iter().for_each(|s| write_string(out, s)),
        Array::Array(v) => v.iter().for_each(|a| write_array(out, a)),
        Array::U64(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::I64(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::F64(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
    }
}
