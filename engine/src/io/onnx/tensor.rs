//! ONNX `TensorProto` to engine tensors: raw little-endian bytes or the typed repeated fields,
//! with the element count checked against the dims before anything is copied.
//!
//! Signed integer types narrower than 64 bits (INT8, INT16, INT32) and UINT16 load widened to
//! `I64`, as the engine has no such dtypes; the values are unchanged.

use super::proto::{data_type as dt, TensorProto};
use crate::backend::{CpuStorage, Storage};
use crate::{DType, Error, Result, Tensor};

fn bad(name: &str, msg: impl std::fmt::Display) -> Error {
    Error::format("onnx", format!("tensor `{name}`: {msg}"))
}

/// The engine dtype for an ONNX data type, and the bytes per element in `raw_data`.
pub(super) fn layout(data_type: i32) -> Option<(DType, usize)> {
    Some(match data_type {
        dt::FLOAT => (DType::F32, 4),
        dt::FLOAT16 => (DType::F16, 2),
        dt::BFLOAT16 => (DType::BF16, 2),
        dt::DOUBLE => (DType::F64, 8),
        dt::INT64 => (DType::I64, 8),
        dt::INT32 => (DType::I64, 4),
        dt::INT16 | dt::UINT16 => (DType::I64, 2),
        dt::INT8 => (DType::I64, 1),
        dt::UINT8 => (DType::U8, 1),
        dt::UINT32 => (DType::U32, 4),
        dt::BOOL => (DType::Bool, 1),
        _ => return None,
    })
}

/// ONNX's name of a data type, for errors.
fn type_name(data_type: i32) -> String {
    let names = [
        "UNDEFINED",
        "FLOAT",
        "UINT8",
        "INT8",
        "UINT16",
        "INT16",
        "INT32",
        "INT64",
        "STRING",
        "BOOL",
        "FLOAT16",
        "DOUBLE",
        "UINT32",
        "UINT64",
        "COMPLEX64",
        "COMPLEX128",
        "BFLOAT16",
    ];
    usize::try_from(data_type)
        .ok()
        .and_then(|i| names.get(i))
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("data type {data_type}"))
}

/// Decodes one tensor; `t.name` names it in errors.
pub(super) fn decode_tensor(t: &TensorProto) -> Result<Tensor> {
    let name = t.name.as_str();
    if t.data_location == 1 || !t.external_data.is_empty() {
        return Err(bad(
            name,
            "data is stored in an external file, which is not supported",
        ));
    }
    let (dtype, width) = layout(t.data_type).ok_or_else(|| {
        bad(
            name,
            format!("element type {} is not supported", type_name(t.data_type)),
        )
    })?;
    let shape = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| bad(name, format!("negative dim {d}"))))
        .collect::<Result<Vec<usize>>>()?;
    let numel = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| bad(name, format!("dims {shape:?} overflow")))?;
    let storage = if !t.raw_data.is_empty() || numel == 0 {
        from_raw(&t.raw_data, t.data_type, dtype, width, numel).map_err(|m| bad(name, m))?
    } else {
        from_typed(t, numel).map_err(|m| bad(name, m))?
    };
    Tensor::from_storage(Storage::Cpu(storage), &shape)
}

fn from_raw(
    raw: &[u8],
    data_type: i32,
    dtype: DType,
    width: usize,
    numel: usize,
) -> std::result::Result<CpuStorage, String> {
    let want = numel.checked_mul(width).ok_or("size overflows")?;
    if raw.len() != want {
        return Err(format!(
            "raw_data holds {} bytes but {numel} elements of {} need {want}",
            raw.len(),
            type_name(data_type)
        ));
    }
    fn widen<const N: usize>(raw: &[u8], f: fn([u8; N]) -> i64) -> CpuStorage {
        CpuStorage::I64(
            raw.chunks_exact(N)
                .map(|c| f(c.try_into().unwrap_or([0; N])))
                .collect(),
        )
    }
    Ok(match data_type {
        dt::INT32 => widen::<4>(raw, |b| i32::from_le_bytes(b) as i64),
        dt::INT16 => widen::<2>(raw, |b| i16::from_le_bytes(b) as i64),
        dt::UINT16 => widen::<2>(raw, |b| u16::from_le_bytes(b) as i64),
        dt::INT8 => widen::<1>(raw, |b| b[0] as i8 as i64),
        _ => CpuStorage::from_le_bytes(raw, dtype).ok_or("ragged raw_data")?,
    })
}

/// The typed repeated field that holds `t`'s elements, by data type (onnx.proto's rules).
fn from_typed(t: &TensorProto, numel: usize) -> std::result::Result<CpuStorage, String> {
    let check = |field: &str, len: usize| {
        if len == numel {
            Ok(())
        } else {
            Err(format!(
                "{field} holds {len} values but the dims need {numel}"
            ))
        }
    };
    let ints = &t.int32_data;
    Ok(match t.data_type {
        dt::FLOAT => {
            check("float_data", t.float_data.len())?;
            CpuStorage::F32(t.float_data.clone())
        }
        dt::DOUBLE => {
            check("double_data", t.double_data.len())?;
            CpuStorage::F64(t.double_data.clone())
        }
        dt::INT64 => {
            check("int64_data", t.int64_data.len())?;
            CpuStorage::I64(t.int64_data.clone())
        }
        dt::UINT32 => {
            check("uint64_data", t.uint64_data.len())?;
            let v = t
                .uint64_data
                .iter()
                .map(|&x| u32::try_from(x).map_err(|_| format!("UINT32 value {x} out of range")));
            CpuStorage::U32(v.collect::<std::result::Result<_, _>>()?)
        }
        dt::INT32 | dt::INT16 | dt::INT8 | dt::UINT16 => {
            check("int32_data", ints.len())?;
            CpuStorage::I64(ints.iter().map(|&x| x as i64).collect())
        }
        dt::UINT8 => {
            check("int32_data", ints.len())?;
            CpuStorage::U8(ints.iter().map(|&x| x as u8).collect())
        }
        dt::BOOL => {
            check("int32_data", ints.len())?;
            CpuStorage::Bool(ints.iter().map(|&x| x != 0).collect())
        }
        // 16-bit floats are stored as their bit patterns, one per int32.
        dt::FLOAT16 => {
            check("int32_data", ints.len())?;
            CpuStorage::F16(
                ints.iter()
                    .map(|&x| half::f16::from_bits(x as u16))
                    .collect(),
            )
        }
        dt::BFLOAT16 => {
            check("int32_data", ints.len())?;
            CpuStorage::BF16(
                ints.iter()
                    .map(|&x| half::bf16::from_bits(x as u16))
                    .collect(),
            )
        }
        other => return Err(format!("no typed data field for {}", type_name(other))),
    })
}
