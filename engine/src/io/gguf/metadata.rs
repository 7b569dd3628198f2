//! GGUF metadata values: the thirteen value types of the format, arrays kept typed (an array of
//! a million `u8` costs a million bytes, not a million enum values), and the lookups the model
//! and tokenizer readers need, each failing with the key's name and what was found instead.

use super::format_error;
use crate::Result;
use std::collections::BTreeMap;

/// The type codes of `gguf_metadata_value_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn from_code(code: u32) -> Option<Self> {
        use ValueType::*;
        Some(match code {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Bytes one value of this type takes at least: the fixed size of a number, the length
    /// prefix of a string, the type and count of an array.
    pub fn min_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// An array's elements, all of one type.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::F32(_) => "f32",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(a) => a.type_name(),
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F64(_) => "f64",
        }
    }

    /// Any integer type holding a value >= 0 (writers use u32 and u64 alike for counts).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A float of either width, or an integer.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            Value::I8(v) => Some(v as f64),
            Value::I16(v) => Some(v as f64),
            Value::I32(v) => Some(v as f64),
            Value::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl Array {
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Array::U8(_) => "array of u8",
            Array::I8(_) => "array of i8",
            Array::U16(_) => "array of u16",
            Array::I16(_) => "array of i16",
            Array::U32(_) => "array of u32",
            Array::I32(_) => "array of i32",
            Array::F32(_) => "array of f32",
            Array::Bool(_) => "array of bool",
            Array::String(_) => "array of string",
            Array::Array(_) => "array of arrays",
            Array::U64(_) => "array of u64",
            Array::I64(_) => "array of i64",
            Array::F64(_) => "array of f64",
        }
    }

    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            Array::String(v) => Some(v),
            _ => None,
        }
    }

    /// The elements of an integer array as i64 (token types are i32 in llama.cpp's files, but
    /// nothing in the format fixes that).
    pub fn to_i64s(&self) -> Option<Vec<i64>> {
        Some(match self {
            Array::U8(v) => v.iter().map(|&x| x as i64).collect(),
            Array::I8(v) => v.iter().map(|&x| x as i64).collect(),
            Array::U16(v) => v.iter().map(|&x| x as i64).collect(),
            Array::I16(v) => v.iter().map(|&x| x as i64).collect(),
            Array::U32(v) => v.iter().map(|&x| x as i64).collect(),
            Array::I32(v) => v.iter().map(|&x| x as i64).collect(),
            Array::I64(v) => v.clone(),
            Array::U64(v) => v.iter().map(|&x| x.min(i64::MAX as u64) as i64).collect(),
            _ => return None,
        })
    }
}

/// The key/value pairs of a file, by key, with the file's name for errors.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    pub(crate) file: String,
    pub(super) values: BTreeMap<String, Value>,
}

impl Metadata {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.values.get(key)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(|k| k.as_str())
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    fn wrong(&self, key: &str, v: &Value, expected: &str) -> crate::Error {
        format_error(
            &self.file,
            format!(
                "metadata key {key:?}: expected {expected}, found {}",
                v.type_name()
            ),
        )
    }

    fn missing(&self, key: &str) -> crate::Error {
        format_error(&self.file, format!("metadata key {key:?} is missing"))
    }

    /// An unsigned integer at `key`, if the key is there.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        self.get(key)
            .map(|v| {
                v.as_u64()
                    .ok_or_else(|| self.wrong(key, v, "an integer >= 0"))
            })
            .transpose()
    }

    pub fn u64(&self, key: &str) -> Result<u64> {
        self.opt_u64(key)?.ok_or_else(|| self.missing(key))
    }

    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        self.get(key)
            .map(|v| v.as_f64().ok_or_else(|| self.wrong(key, v, "a number")))
            .transpose()
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        self.get(key)
            .map(|v| v.as_str().ok_or_else(|| self.wrong(key, v, "a string")))
            .transpose()
    }

    pub fn str(&self, key: &str) -> Result<&str> {
        self.opt_str(key)?.ok_or_else(|| self.missing(key))
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        self.get(key)
            .map(|v| v.as_bool().ok_or_else(|| self.wrong(key, v, "a bool")))
            .transpose()
    }

    pub fn opt_strings(&self, key: &str) -> Result<Option<&[String]>> {
        self.get(key)
            .map(|v| {
                v.as_array()
                    .and_then(Array::as_strings)
                    .ok_or_else(|| self.wrong(key, v, "an array of string"))
            })
            .transpose()
    }

    pub fn opt_i64s(&self, key: &str) -> Result<Option<Vec<i64>>> {
        self.get(key)
            .map(|v| {
                v.as_array()
                    .and_then(Array::to_i64s)
                    .ok_or_else(|| self.wrong(key, v, "an array of integers"))
            })
            .transpose()
    }
}
