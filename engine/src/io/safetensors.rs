//! safetensors read and write, through the `safetensors` crate.
//!
//! Files are untrusted: `header::validate` checks the framing, every offset and every size
//! before the crate parses the header, so a corrupt file gives an error, never a panic, and the
//! only large allocation is the tensors' data, which the file's length bounds. Writes go to a
//! sibling temporary file (`TempFile`) that is synced and then renamed, so a crash leaves the
//! old file or the new one, never half of one (and the next save removes the crashed one's
//! temp).

mod header;
mod sharded;
pub use sharded::load_sharded;
#[cfg(test)]
mod tests;

use super::temp_file::TempFile;
use crate::backend::{CpuStorage, Storage};
use crate::{no_grad, Device, Error, Result, Tensor};
use header::{engine_dtype, file_dtype};
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

/// A loaded file: its tensors by name and its `__metadata__` string map (empty when absent).
#[derive(Clone)]
pub struct Loaded {
    pub tensors: BTreeMap<String, Tensor>,
    pub metadata: HashMap<String, String>,
}

/// Anything that names tensors: a map, or a list of (name, tensor) pairs.
pub trait NamedTensors {
    fn named(&self) -> Vec<(&str, &Tensor)>;
}

impl NamedTensors for BTreeMap<String, Tensor> {
    fn named(&self) -> Vec<(&str, &Tensor)> {
        self.iter().map(|(n, t)| (n.as_str(), t)).collect()
    }
}

impl NamedTensors for HashMap<String, Tensor> {
    fn named(&self) -> Vec<(&str, &Tensor)> {
        self.iter().map(|(n, t)| (n.as_str(), t)).collect()
    }
}

impl<S: AsRef<str>> NamedTensors for [(S, Tensor)] {
    fn named(&self) -> Vec<(&str, &Tensor)> {
        self.iter().map(|(n, t)| (n.as_ref(), t)).collect()
    }
}

impl<S: AsRef<str>> NamedTensors for Vec<(S, Tensor)> {
    fn named(&self) -> Vec<(&str, &Tensor)> {
        self.as_slice().named()
    }
}

// ----- reading -----

/// Reads every tensor of a safetensors file.
pub fn load(path: impl AsRef<Path>) -> Result<BTreeMap<String, Tensor>> {
    Ok(load_with_metadata(path)?.tensors)
}

/// Reads every tensor of a safetensors file, and its metadata.
pub fn load_with_metadata(path: impl AsRef<Path>) -> Result<Loaded> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    load_bytes_with_metadata(&bytes).map_err(|e| match e {
        Error::Format { format, msg } => Error::Format {
            format,
            msg: format!("{}: {msg}", path.display()),
        },
        e => e,
    })
}

/// Reads every tensor of a safetensors file held in memory.
pub fn load_bytes(bytes: &[u8]) -> Result<BTreeMap<String, Tensor>> {
    Ok(load_bytes_with_metadata(bytes)?.tensors)
}

/// Reads every tensor of a safetensors file held in memory, and its metadata.
pub fn load_bytes_with_metadata(bytes: &[u8]) -> Result<Loaded> {
    let metadata = header::validate(bytes)?;
    let file = SafeTensors::deserialize(bytes).map_err(crate_error)?;
    let mut tensors = BTreeMap::new();
    for (name, view) in file.iter() {
        let dtype = engine_dtype(name, view.dtype())?;
        let data = view.data();
        // The crate checks this too; a wrong length must never reach the storage.
        if header::byte_len(view.shape(), dtype) != Some(data.len()) {
            return Err(Error::format(
                "safetensors",
                format!(
                    "tensor `{name}`: shape {:?} of {dtype} does not match its {} data bytes",
                    view.shape(),
                    data.len()
                ),
            ));
        }
        let storage = CpuStorage::from_le_bytes(data, dtype).ok_or_else(|| {
            Error::format(
                "safetensors",
                format!("tensor `{name}`: ragged {dtype} data"),
            )
        })?;
        let tensor = Tensor::from_storage(Storage::Cpu(storage), view.shape())?;
        tensors.insert(name.to_string(), tensor);
    }
    Ok(Loaded { tensors, metadata })
}

fn crate_error(e: safetensors::SafeTensorError) -> Error {
    Error::format("safetensors", e.to_string())
}

// ----- writing -----

/// Writes `tensors` (made contiguous, on the CPU) and optional metadata to `path`, atomically:
/// through our own temp file (which a later save removes if this one is killed), with the mode
/// any new file gets (the umask's), and synced before the rename.
pub fn save<T: NamedTensors + ?Sized>(
    path: impl AsRef<Path>,
    tensors: &T,
    metadata: Option<HashMap<String, String>>,
) -> Result<()> {
    let path = path.as_ref();
    let views = prepare(tensors)?;
    let tmp = TempFile::beside(path);
    let file = std::fs::File::create(tmp.path()).map_err(|e| Error::io(tmp.path(), e))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    write_to(&mut out, views, metadata)
        .and_then(|()| out.flush())
        .map_err(|e| Error::io(tmp.path(), e))?;
    let file = out
        .into_inner()
        .map_err(|e| Error::io(tmp.path(), e.into_error()))?;
    file.sync_all().map_err(|e| Error::io(tmp.path(), e))?;
    drop(file);
    tmp.persist(path)?;
    // Persist the rename itself; not every platform lets a directory be opened, so best effort.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// The safetensors layout, as the crate's `serialize` lays it out: the header's length (8
/// bytes, little-endian), the header (the crate's `Metadata` as JSON, padded with spaces to a
/// multiple of 8 bytes), then each tensor's bytes, larger dtypes first, then by name.
fn write_to(
    out: &mut impl Write,
    mut views: Vec<(&str, TensorBytes)>,
    metadata: Option<HashMap<String, String>>,
) -> std::io::Result<()> {
    views.sort_by(|(ln, l), (rn, r)| r.dtype.cmp(&l.dtype).then(ln.cmp(rn)));
    let mut offset = 0;
    let infos = views
        .iter()
        .map(|(name, v)| {
            let n = v.data_len();
            offset += n;
            let info = TensorInfo {
                dtype: v.dtype,
                shape: v.shape().to_vec(),
                data_offsets: (offset - n, offset),
            };
            (name.to_string(), info)
        })
        .collect();
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
    let header = Metadata::new(metadata, infos).map_err(|e| invalid(e.to_string()))?;
    let mut header = serde_json::to_vec(&header).map_err(|e| invalid(e.to_string()))?;
    header.resize(header.len().next_multiple_of(8), b' ');
    // What the crate refuses to read (and to serialize).
    const MAX_HEADER: usize = 100_000_000;
    if header.len() > MAX_HEADER {
        return Err(invalid(format!(
            "the header of {} bytes is over the format's {MAX_HEADER}",
            header.len()
        )));
    }
    out.write_all(&(header.len() as u64).to_le_bytes())?;
    out.write_all(&header)?;
    for (_, v) in &views {
        out.write_all(&v.data())?;
    }
    Ok(())
}

/// The bytes of a safetensors file holding `tensors` and optional metadata.
pub fn save_bytes<T: NamedTensors + ?Sized>(
    tensors: &T,
    metadata: Option<HashMap<String, String>>,
) -> Result<Vec<u8>> {
    safetensors::serialize(prepare(tensors)?, metadata).map_err(crate_error)
}

/// A contiguous CPU tensor, ready for the crate to write.
struct TensorBytes {
    tensor: Tensor,
    dtype: Dtype,
}

impl View for TensorBytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        self.tensor.shape()
    }

    fn data(&self) -> Cow<'_, [u8]> {
        // Only the view's elements, not the whole storage it may share.
        let range = self.tensor.layout().contiguous_range().unwrap_or(0..0);
        let storage = self.tensor.storage();
        match &*storage {
            Storage::Cpu(s) => Cow::Owned(le_bytes(s, range)),
            // `prepare` moved every tensor to the host.
            Storage::Cuda(_) => Cow::Owned(Vec::new()),
        }
    }

    fn data_len(&self) -> usize {
        self.tensor.numel() * self.tensor.dtype().size_in_bytes()
    }
}

fn prepare<T: NamedTensors + ?Sized>(tensors: &T) -> Result<Vec<(&str, TensorBytes)>> {
    let named = tensors.named();
    let mut seen = std::collections::HashSet::with_capacity(named.len());
    let mut out = Vec::with_capacity(named.len());
    for (name, t) in named {
        if !seen.insert(name) {
            return Err(Error::invalid(
                "safetensors::save",
                format!("tensor name `{name}` appears twice"),
            ));
        }
        let tensor = no_grad(|| t.detach().to_device(Device::Cpu)?.contiguous())?;
        let dtype = file_dtype(tensor.dtype());
        out.push((name, TensorBytes { tensor, dtype }));
    }
    Ok(out)
}

fn le_bytes(s: &CpuStorage, r: std::ops::Range<usize>) -> Vec<u8> {
    match s {
        CpuStorage::Bool(v) => v[r].iter().map(|&b| b as u8).collect(),
        CpuStorage::U8(v) => v[r].to_vec(),
        CpuStorage::U32(v) => bytemuck::cast_slice(&v[r]).to_vec(),
        CpuStorage::I64(v) => bytemuck::cast_slice(&v[r]).to_vec(),
        CpuStorage::BF16(v) => bytemuck::cast_slice(&v[r]).to_vec(),
        CpuStorage::F16(v) => bytemuck::cast_slice(&v[r]).to_vec(),
        CpuStorage::F32(v) => bytemuck::cast_slice(&v[r]).to_vec(),
        CpuStorage::F64(v) => bytemuck::cast_slice(&v[r]).to_vec(),
    }
}
