//! Reading a GGUF file (versions 2 and 3, little-endian): the header, every metadata key/value,
//! the tensor infos, and each tensor's data on demand.
//!
//! Layout: magic `GGUF`, u32 version, u64 tensor count, u64 key/value count, the key/values
//! (u64-length strings, a u32 value type, the value; arrays are a u32 element type, a u64 count
//! and the elements), the tensor infos (name, u32 rank, u64 dims innermost first, u32 ggml type,
//! u64 offset into the data), padding to `general.alignment` (32 when absent), the data.
//!
//! Only the header is parsed up front; a tensor's bytes are read when asked for, so loading a
//! model holds one tensor's quantized bytes at a time beside the weights already made. Counts
//! are checked against the bytes left in the file before anything is allocated, nesting is
//! bounded, and every offset and size is checked against the file's length.

use super::cursor::Cursor;
use super::ggml_type::GgmlType;
use super::metadata::Metadata;
use super::read_metadata::read_metadata;
use super::{format_error, quants};
use crate::{Error, Result, Tensor};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// Bytes a key/value takes at least (an empty key, a type, a one-byte value), and a tensor info
/// (an empty name, a rank, a type, an offset).
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// Where one tensor's data lies and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions as ggml lists them: the innermost (contiguous) first.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset from the start of the data section.
    pub offset: u64,
    /// Bytes of data.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// The row-major shape (ggml's dims reversed): a `[out, in]` weight has dims `[in, out]`.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// An open GGUF file: its header parsed, its tensor data read on demand from `source`.
pub struct GgufFile<R> {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// File offset of the data section.
    pub data_start: u64,
    by_name: BTreeMap<String, usize>,
    source: R,
    file: String,
}

impl GgufFile<BufReader<File>> {
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let f = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
        GgufFile::read(BufReader::new(f), len, &path.display().to_string())
    }
}

impl GgufFile<std::io::Cursor<Vec<u8>>> {
    /// A file held in memory; `name` goes into error messages.
    pub fn from_bytes(bytes: Vec<u8>, name: &str) -> Result<Self> {
        let len = bytes.len() as u64;
        GgufFile::read(std::io::Cursor::new(bytes), len, name)
    }
}

impl<R: Read + Seek> GgufFile<R> {
    /// Parses the header of the `len`-byte file `source` (positioned at its start).
    pub fn read(source: R, len: u64, name: &str) -> Result<Self> {
        let mut c = Cursor::new(source, len, name.to_string());
        let version = read_preamble(&mut c)?;
        let n_tensors = c.u64("tensor count")?;
        let n_kv = c.u64("metadata count")?;
        c.check_count(n_kv, MIN_KV_BYTES, "metadata count")?;
        c.check_count(n_tensors, MIN_TENSOR_INFO_BYTES, "tensor count")?;
        let metadata = read_metadata(&mut c, n_kv)?;
        let alignment = alignment(&metadata)?;
        let tensors = (0..n_tensors)
            .map(|i| read_tensor_info(&mut c, i, alignment))
            .collect::<Result<Vec<_>>>()?;
        let data_start = c.pos().next_multiple_of(alignment);
        let data_len = len.saturating_sub(data_start);
        let mut by_name = BTreeMap::new();
        for (i, t) in tensors.iter().enumerate() {
            if by_name.insert(t.name.clone(), i).is_some() {
                return Err(c.error(&format!("tensor {:?}", t.name), "listed twice"));
            }
            if t.offset
                .checked_add(t.n_bytes)
                .is_none_or(|end| end > data_len)
            {
                return Err(c.error(
                    &format!("tensor {:?}", t.name),
                    format!(
                        "its {} bytes at data offset {} run past the end of the file (the data \
                         section holds {data_len} bytes from offset {data_start})",
                        t.n_bytes, t.offset
                    ),
                ));
            }
        }
        Ok(GgufFile {
            version,
            metadata,
            tensors,
            alignment,
            data_start,
            by_name,
            source: c.into_inner(),
            file: name.to_string(),
        })
    }

    /// The file's name as errors give it.
    pub fn name(&self) -> &str {
        &self.file
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    fn info_or_error(&self, name: &str) -> Result<TensorInfo> {
        self.tensor_info(name)
            .cloned()
            .ok_or_else(|| format_error(&self.file, format!("tensor {name:?} is not in the file")))
    }

    /// The stored bytes of tensor `name`.
    pub fn raw(&mut self, name: &str) -> Result<Vec<u8>> {
        let info = self.info_or_error(name)?;
        let at = self.data_start + info.offset;
        let mut buf = vec![0u8; info.n_bytes as usize];
        let file = &self.file;
        let fail = |e: std::io::Error| {
            format_error(
                file,
                format!(
                    "tensor {name:?}: reading {} bytes at offset {at}: {e}",
                    info.n_bytes
                ),
            )
        };
        self.source.seek(SeekFrom::Start(at)).map_err(fail)?;
        self.source.read_exact(&mut buf).map_err(fail)?;
        Ok(buf)
    }

    /// Tensor `name` dequantized to f32, with its row-major shape.
    pub fn f32_values(&mut self, name: &str) -> Result<(Vec<f32>, Vec<usize>)> {
        let info = self.info_or_error(name)?;
        if !quants::can_dequantize(info.ggml_type) {
            let names: Vec<&str> = quants::SUPPORTED.iter().map(|t| t.name).collect();
            return Err(format_error(
                &self.file,
                format!(
                    "tensor {name:?}: type {} is not supported (supported: {})",
                    info.ggml_type,
                    names.join(", ")
                ),
            ));
        }
        let bytes = self.raw(name)?;
        let values = quants::dequantize(info.ggml_type, &bytes)
            .map_err(|e| format_error(&self.file, format!("tensor {name:?}: {e}")))?;
        Ok((values, info.shape()))
    }

    /// Tensor `name` as an F32 tensor on the CPU.
    pub fn tensor(&mut self, name: &str) -> Result<Tensor> {
        let (values, shape) = self.f32_values(name)?;
        Tensor::from_vec(values, &shape)
    }
}

/// The magic and the version; v1 (32-bit counts) and big-endian files are refused by name.
fn read_preamble<R: Read>(c: &mut Cursor<R>) -> Result<u32> {
    let magic = c.array::<4>("magic")?;
    if &magic != MAGIC {
        return Err(c.error(
            "magic",
            format!("not a GGUF file (starts with {magic:02x?}, expected \"GGUF\")"),
        ));
    }
    let version = c.u32("version")?;
    match version {
        2 | 3 => Ok(version),
        1 => Err(c.error(
            "version",
            "GGUF version 1 (32-bit counts) is not supported; convert the file to version 3",
        )),
        v if matches!(v.swap_bytes(), 2 | 3) => Err(c.error(
            "version",
            "a big-endian GGUF file; only little-endian files are supported",
        )),
        v => Err(c.error(
            "version",
            format!("unknown GGUF version {v} (supported: 2, 3)"),
        )),
    }
}

/// `general.alignment`: a power of two, 32 when the key is absent.
fn alignment(meta: &Metadata) -> Result<u64> {
    match meta.opt_u64("general.alignment")? {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(a) if a.is_power_of_two() => Ok(a),
        Some(a) => Err(format_error(
            &meta.file,
            format!("metadata key \"general.alignment\": {a} is not a power of two"),
        )),
    }
}

fn read_tensor_info<R: Read>(c: &mut Cursor<R>, index: u64, alignment: u64) -> Result<TensorInfo> {
    let name = c.string(&format!("tensor info {index}: name"))?;
    let what = format!("tensor {name:?}");
    let rank = c.u32(&what)?;
    if rank == 0 || rank > MAX_DIMS {
        return Err(c.error(
            &what,
            format!("rank {rank} (ggml tensors have 1 to {MAX_DIMS} dims)"),
        ));
    }
    let dims = (0..rank)
        .map(|_| c.u64(&what))
        .collect::<Result<Vec<_>>>()?;
    let code = c.u32(&what)?;
    let ggml_type = GgmlType::from_code(code)
        .ok_or_else(|| c.error(&what, format!("unknown tensor type {code}")))?;
    let offset = c.u64(&what)?;
    if !offset.is_multiple_of(alignment) {
        return Err(c.error(
            &what,
            format!("data offset {offset} is not a multiple of the alignment {alignment}"),
        ));
    }
    let n_bytes = tensor_bytes(&dims, ggml_type).map_err(|msg| c.error(&what, msg))?;
    Ok(TensorInfo {
        name,
        dims,
        ggml_type,
        offset,
        n_bytes,
    })
}

/// The bytes a tensor of `dims` takes: whole blocks along the innermost dim, no overflow, and a
/// size that fits this machine's memory addressing.
fn tensor_bytes(dims: &[u64], t: GgmlType) -> std::result::Result<u64, String> {
    let rows = dims[1..]
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("dims {dims:?} overflow"))?;
    let row = t.row_bytes(dims[0]).ok_or_else(|| {
        format!(
            "innermost dim {} is not a multiple of the {t} block size {}",
            dims[0], t.block_size
        )
    })?;
    let total = row
        .checked_mul(rows)
        .filter(|&n| n <= isize::MAX as u64)
        .ok_or_else(|| format!("dims {dims:?} of {t} overflow"))?;
    // The element count must also fit, for the f32 values it dequantizes to.
    dims.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= (isize::MAX as u64) / 4)
        .ok_or_else(|| format!("dims {dims:?} hold too many values"))?;
    Ok(total)
}
