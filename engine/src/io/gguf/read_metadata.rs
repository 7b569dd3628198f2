//! Reading a GGUF file's key/value pairs: each key, its value type and its value, arrays kept
//! typed and read in one piece where their elements have a fixed size. Counts are checked
//! against the bytes left before anything is allocated, and nesting is bounded.

use super::cursor::Cursor;
use super::metadata::{Array, Metadata, Value, ValueType};
use crate::Result;
use std::collections::BTreeMap;
use std::io::Read;

/// Arrays of arrays deeper than this are refused (each level costs a stack frame; the format's
/// writers nest at most one level).
const MAX_NESTING: usize = 8;
/// The format's limit on a key's length.
const MAX_KEY_LEN: usize = 65535;

pub(super) fn read_metadata<R: Read>(c: &mut Cursor<R>, n_kv: u64) -> Result<Metadata> {
    let mut values = BTreeMap::new();
    for i in 0..n_kv {
        let key = c.string(&format!("metadata entry {i}: key"))?;
        let what = format!("metadata key {key:?}");
        if key.len() > MAX_KEY_LEN {
            return Err(c.error(
                &what,
                format!("a key of {} bytes (the limit is {MAX_KEY_LEN})", key.len()),
            ));
        }
        let code = c.u32(&what)?;
        let ty = ValueType::from_code(code)
            .ok_or_else(|| c.error(&what, format!("unknown value type {code}")))?;
        let value = read_value(c, ty, &what, 0)?;
        if values.insert(key, value).is_some() {
            return Err(c.error(&what, "listed twice"));
        }
    }
    Ok(Metadata {
        file: c.file.clone(),
        values,
    })
}

fn read_value<R: Read>(
    c: &mut Cursor<R>,
    ty: ValueType,
    what: &str,
    depth: usize,
) -> Result<Value> {
    Ok(match ty {
        ValueType::U8 => Value::U8(c.u8(what)?),
        ValueType::I8 => Value::I8(c.u8(what)? as i8),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array(what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array(what)?)),
        ValueType::U32 => Value::U32(c.u32(what)?),
        ValueType::I32 => Value::I32(i32::from_le_bytes(c.array(what)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array(what)?)),
        ValueType::U64 => Value::U64(c.u64(what)?),
        ValueType::I64 => Value::I64(i64::from_le_bytes(c.array(what)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array(what)?)),
        ValueType::Bool => Value::Bool(read_bool(c, what)?),
        ValueType::String => Value::String(c.string(what)?),
        ValueType::Array => Value::Array(read_array(c, what, depth)?),
    })
}

fn read_bool<R: Read>(c: &mut Cursor<R>, what: &str) -> Result<bool> {
    match c.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(c.error(what, format!("a bool must be 0 or 1, found {b}"))),
    }
}

/// The `n` fixed-size elements of a numeric array, read in one piece.
fn numbers<R: Read, T, const N: usize>(
    c: &mut Cursor<R>,
    n: u64,
    what: &str,
    from: fn([u8; N]) -> T,
) -> Result<Vec<T>> {
    let bytes = c.bytes(n * N as u64, what)?;
    Ok(bytes
        .chunks_exact(N)
        .map(|b| from(b.try_into().unwrap_or([0; N])))
        .collect())
}

fn read_array<R: Read>(c: &mut Cursor<R>, what: &str, depth: usize) -> Result<Array> {
    if depth >= MAX_NESTING {
        return Err(c.error(
            what,
            format!("arrays nested deeper than {MAX_NESTING} levels"),
        ));
    }
    let code = c.u32(what)?;
    let ty = ValueType::from_code(code)
        .ok_or_else(|| c.error(what, format!("unknown array element type {code}")))?;
    let n = c.u64(what)?;
    c.check_count(n, ty.min_size(), what)?;
    Ok(match ty {
        ValueType::U8 => Array::U8(c.bytes(n, what)?),
        ValueType::I8 => Array::I8(numbers(c, n, what, i8::from_le_bytes)?),
        ValueType::U16 => Array::U16(numbers(c, n, what, u16::from_le_bytes)?),
        ValueType::I16 => Array::I16(numbers(c, n, what, i16::from_le_bytes)?),
        ValueType::U32 => Array::U32(numbers(c, n, what, u32::from_le_bytes)?),
        ValueType::I32 => Array::I32(numbers(c, n, what, i32::from_le_bytes)?),
        ValueType::F32 => Array::F32(numbers(c, n, what, f32::from_le_bytes)?),
        ValueType::U64 => Array::U64(numbers(c, n, what, u64::from_le_bytes)?),
        ValueType::I64 => Array::I64(numbers(c, n, what, i64::from_le_bytes)?),
        ValueType::F64 => Array::F64(numbers(c, n, what, f64::from_le_bytes)?),
        ValueType::Bool => Array::Bool((0..n).map(|_| read_bool(c, what)).collect::<Result<_>>()?),
        ValueType::String => Array::String((0..n).map(|_| c.string(what)).collect::<Result<_>>()?),
        ValueType::Array => Array::Array(
            (0..n)
                .map(|_| read_array(c, what, depth + 1))
                .collect::<Result<_>>()?,
        ),
    })
}
