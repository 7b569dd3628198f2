//! A check of the header that runs before the `safetensors` crate sees the bytes.
//!
//! The crate validates the header length and that the offsets tile the data, but it adds the
//! last offset to the header length unchecked (`buffer_end + N_LEN + n`): offsets that sum past
//! `usize::MAX` overflow there (a panic with overflow checks, a wrap and then an out-of-range
//! slice without them). It also buffers the whole header as untyped values (`serde(flatten)`),
//! so a header with a shape of millions of dims costs many times its size. This pass parses the
//! header into typed fields, checks every size with checked arithmetic, and rejects what this
//! engine cannot hold, so the crate only ever sees headers whose arithmetic is sound.

use crate::{DType, Error, Result};
use safetensors::Dtype;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::HashMap;

/// Leading bytes that hold the header length.
pub(super) const LEN_BYTES: usize = 8;
/// The crate's own limit on the header length.
const MAX_HEADER_BYTES: usize = 100_000_000;
/// More dims than any real tensor has; it keeps a hostile header from costing much memory.
pub(super) const MAX_RANK: usize = 64;

#[derive(Deserialize)]
struct RawInfo {
    dtype: Dtype,
    shape: Vec<usize>,
    data_offsets: (usize, usize),
}

struct RawHeader {
    tensors: Vec<(String, RawInfo)>,
    metadata: HashMap<String, String>,
}

impl<'de> Deserialize<'de> for RawHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct HeaderVisitor;
        impl<'de> Visitor<'de> for HeaderVisitor {
            type Value = RawHeader;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object of tensor entries")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<RawHeader, A::Error> {
                let mut tensors = Vec::new();
                let mut metadata = HashMap::new();
                while let Some(name) = map.next_key::<String>()? {
                    if name == "__metadata__" {
                        metadata = map.next_value()?;
                    } else {
                        let info = map.next_value::<RawInfo>()?;
                        tensors.push((name, info));
                    }
                }
                Ok(RawHeader { tensors, metadata })
            }
        }
        d.deserialize_map(HeaderVisitor)
    }
}

fn bad(msg: impl Into<String>) -> Error {
    Error::format("safetensors", msg)
}

/// The engine dtype that a safetensors dtype loads as, or an error naming the tensor.
pub(super) fn engine_dtype(name: &str, dtype: Dtype) -> Result<DType> {
    Ok(match dtype {
        Dtype::BOOL => DType::Bool,
        Dtype::U8 => DType::U8,
        Dtype::U32 => DType::U32,
        Dtype::I64 => DType::I64,
        Dtype::BF16 => DType::BF16,
        Dtype::F16 => DType::F16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        other => {
            return Err(bad(format!(
                "tensor `{name}` has dtype {other:?}, which RustingBrain does not support \
                 (supported: BOOL, U8, U32, I64, BF16, F16, F32, F64)"
            )))
        }
    })
}

pub(super) fn file_dtype(dtype: DType) -> Dtype {
    match dtype {
        DType::Bool => Dtype::BOOL,
        DType::U8 => Dtype::U8,
        DType::U32 => Dtype::U32,
        DType::I64 => Dtype::I64,
        DType::BF16 => Dtype::BF16,
        DType::F16 => Dtype::F16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
    }
}

/// The number of bytes a tensor of `shape` and `dtype` holds, if every product fits. The
/// product of the dims clamped to 1 must fit too, since the contiguous strides are built from it.
pub(super) fn byte_len(shape: &[usize], dtype: DType) -> Option<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d.max(1)))?;
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))?
        .checked_mul(dtype.size_in_bytes())
}

/// Checks the whole file's framing and every tensor entry; returns the `__metadata__` map.
pub(super) fn validate(bytes: &[u8]) -> Result<HashMap<String, String>> {
    let len_bytes: [u8; LEN_BYTES] = bytes
        .get(..LEN_BYTES)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            bad(format!(
                "{} bytes are too few for the 8-byte header length",
                bytes.len()
            ))
        })?;
    let declared = u64::from_le_bytes(len_bytes);
    let available = bytes.len() - LEN_BYTES;
    let header_len = usize::try_from(declared)
        .ok()
        .filter(|&n| n <= available && n <= MAX_HEADER_BYTES)
        .ok_or_else(|| {
            bad(format!(
                "the header claims {declared} bytes but the file has {available} after the length \
                 (limit {MAX_HEADER_BYTES}); the file is truncated or not safetensors"
            ))
        })?;
    let header = &bytes[LEN_BYTES..LEN_BYTES + header_len];
    let data_len = available - header_len;
    let header =
        std::str::from_utf8(header).map_err(|e| bad(format!("the header is not UTF-8: {e}")))?;
    let raw: RawHeader = serde_json::from_str(header)
        .map_err(|e| bad(format!("the header is not valid JSON: {e}")))?;

    let mut spans = Vec::with_capacity(raw.tensors.len());
    for (name, info) in &raw.tensors {
        if info.shape.len() > MAX_RANK {
            return Err(bad(format!(
                "tensor `{name}` has {} dims, more than the {MAX_RANK} supported",
                info.shape.len()
            )));
        }
        let dtype = engine_dtype(name, info.dtype)?;
        let (start, end) = info.data_offsets;
        let want = byte_len(&info.shape, dtype).ok_or_else(|| {
            bad(format!(
                "tensor `{name}`: shape {:?} of {dtype} overflows",
                info.shape
            ))
        })?;
        if end.checked_sub(start) != Some(want) {
            return Err(bad(format!(
                "tensor `{name}`: shape {:?} of {dtype} needs {want} bytes but its offsets \
                 are [{start}, {end}]",
                info.shape
            )));
        }
        if end > data_len {
            return Err(bad(format!(
                "tensor `{name}` ends at byte {end} but the data section holds {data_len}; \
                 the file is truncated"
            )));
        }
        spans.push((start, end, name.as_str()));
    }
    // The offsets must tile the data section exactly, as the format requires.
    spans.sort_unstable();
    let mut at = 0;
    for &(start, end, name) in &spans {
        if start != at {
            return Err(bad(format!(
                "tensor `{name}` starts at byte {start}, expected {at} (overlap or gap)"
            )));
        }
        at = end;
    }
    if at != data_len {
        return Err(bad(format!(
            "the tensors cover {at} bytes but the data section holds {data_len}"
        )));
    }
    let mut names: Vec<&str> = spans.iter().map(|s| s.2).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(bad(format!(
            "tensor `{}` appears twice in the header",
            w[0]
        )));
    }
    Ok(raw.metadata)
}
