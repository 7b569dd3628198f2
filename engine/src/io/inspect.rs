//! What a checkpoint holds — names, shapes, dtypes and sizes — read from its header where the
//! format has one (safetensors, a sharded safetensors index, GGUF), so a 10 GB file is listed
//! without reading its data; other formats (PyTorch, NPY, NPZ) are loaded to be listed.

use super::any::{load_any, sniff, Format};
use super::gguf::GgufFile;
use crate::{Error, Result};
use serde_json::Value;
use std::io::Read;
use std::path::Path;

/// One tensor as its file describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorEntry {
    pub name: String,
    pub shape: Vec<usize>,
    /// The file's name for the element type (`F32`, `BF16`, `Q4_K`).
    pub dtype: String,
    pub bytes: u64,
}

/// The tensors of the checkpoint at `path`, any format `io::any::load_any` reads.
pub fn entries(path: &Path) -> Result<Vec<TensorEntry>> {
    let mut head = [0u8; 16];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| Error::io(path, e))?;
    match sniff(&head[..n]) {
        Some(Format::Safetensors) => safetensors_entries(path),
        Some(Format::SafetensorsIndex) => index_entries(path),
        Some(Format::Gguf) => {
            let file = GgufFile::open(path)?;
            Ok(file
                .tensors
                .iter()
                .map(|t| TensorEntry {
                    name: t.name.clone(),
                    // ggml lists the innermost dim first.
                    shape: t.dims.iter().rev().map(|&d| d as usize).collect(),
                    dtype: format!("{:?}", t.ggml_type),
                    bytes: t.n_bytes,
                })
                .collect())
        }
        _ => Ok(load_any(path)?
            .into_iter()
            .map(|(name, t)| TensorEntry {
                name,
                shape: t.shape().to_vec(),
                dtype: t.dtype().to_string(),
                bytes: (t.numel() * t.dtype().size_in_bytes()) as u64,
            })
            .collect()),
    }
}

/// A safetensors header: 8 bytes of length, then JSON of name -> dtype, shape, data_offsets.
fn safetensors_entries(path: &Path) -> Result<Vec<TensorEntry>> {
    let bad = |msg: String| Error::format("safetensors", format!("{}: {msg}", path.display()));
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let size = f.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(|e| Error::io(path, e))?;
    let n = u64::from_le_bytes(len);
    // The format caps headers at 100 MB; a larger length is a corrupt or hostile file.
    if n > 100_000_000 || n + 8 > size {
        return Err(bad(format!(
            "header length {n} does not fit the file of {size} bytes"
        )));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).map_err(|e| Error::io(path, e))?;
    let json: Value = serde_json::from_slice(&header).map_err(|e| bad(format!("header: {e}")))?;
    let map = json
        .as_object()
        .ok_or_else(|| bad("the header is not an object".into()))?;
    let data = size - 8 - n;
    let mut out = Vec::new();
    for (name, info) in map.iter().filter(|(k, _)| *k != "__metadata__") {
        let field = |k: &str| {
            info.get(k)
                .ok_or_else(|| bad(format!("`{name}` has no {k}")))
        };
        let shape = field("shape")?
            .as_array()
            .and_then(|a| {
                a.iter()
                    .map(|d| d.as_u64().map(|d| d as usize))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| bad(format!("`{name}`: shape is not a list of sizes")))?;
        let offsets = field("data_offsets")?
            .as_array()
            .and_then(|a| Some((a.first()?.as_u64()?, a.get(1)?.as_u64()?)))
            .ok_or_else(|| bad(format!("`{name}`: data_offsets is not [begin, end]")))?;
        if offsets.0 > offsets.1 || offsets.1 > data {
            return Err(bad(format!(
                "`{name}`: data_offsets {offsets:?} lie outside the {data} data bytes"
            )));
        }
        let dtype = field("dtype")?
            .as_str()
            .ok_or_else(|| bad(format!("`{name}`: dtype is not a string")))?;
        out.push(TensorEntry {
            name: name.clone(),
            shape,
            dtype: dtype.to_string(),
            bytes: offsets.1 - offsets.0,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// A sharded checkpoint's index: the headers of the shards it lists (beside it).
fn index_entries(path: &Path) -> Result<Vec<TensorEntry>> {
    let bad = |msg: String| Error::format("safetensors", format!("{}: {msg}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let index: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let map = index
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no weight_map object".into()))?;
    let mut shards: Vec<&str> = map.values().filter_map(Value::as_str).collect();
    shards.sort_unstable();
    shards.dedup();
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for shard in shards {
        if shard.contains(['/', '\\']) || shard == ".." || shard.is_empty() {
            return Err(bad(format!(
                "shard name {shard:?} is not a file in the directory"
            )));
        }
        out.extend(safetensors_entries(&dir.join(shard))?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The entries as a table with a total line.
pub fn table(entries: &[TensorEntry]) -> String {
    let width = entries
        .iter()
        .map(|e| e.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = format!(
        "{:width$}  {:<20} {:<6} {:>12}\n",
        "name", "shape", "dtype", "bytes"
    );
    let (mut elements, mut bytes) = (0usize, 0u64);
    for e in entries {
        elements += e.shape.iter().product::<usize>();
        bytes += e.bytes;
        let shape = format!("{:?}", e.shape);
        out += &format!(
            "{:width$}  {shape:<20} {:<6} {:>12}\n",
            e.name, e.dtype, e.bytes
        );
    }
    out += &format!(
        "{} tensors, {elements} elements, {bytes} bytes",
        entries.len()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device, Tensor};

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("rb-inspect-{name}-{}", std::process::id()))
    }

    #[test]
    fn a_safetensors_file_lists_its_tensors_from_the_header() {
        let path = temp("small.safetensors");
        let w = Tensor::zeros(&[2, 3], DType::F32, Device::Cpu).unwrap();
        let ids = Tensor::zeros(&[4], DType::I64, Device::Cpu).unwrap();
        crate::io::safetensors::save(
            &path,
            &[("w".to_string(), w), ("ids".to_string(), ids)][..],
            None,
        )
        .unwrap();
        let e = entries(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(e.len(), 2);
        assert_eq!(
            (
                e[0].name.as_str(),
                e[0].shape.as_slice(),
                e[0].dtype.as_str(),
                e[0].bytes
            ),
            ("ids", &[4][..], "I64", 32)
        );
        assert_eq!(
            (
                e[1].name.as_str(),
                e[1].shape.as_slice(),
                e[1].dtype.as_str(),
                e[1].bytes
            ),
            ("w", &[2, 3][..], "F32", 24)
        );
        assert!(
            table(&e).ends_with("2 tensors, 10 elements, 56 bytes"),
            "{}",
            table(&e)
        );
    }

    /// A header describing a 4 GB tensor over a sparse file: listed at once, nothing read.
    #[test]
    fn a_large_file_is_listed_without_reading_its_data() {
        let path = temp("large.safetensors");
        let bytes: u64 = 4 << 30;
        let header = format!(
            "{{\"big\":{{\"dtype\":\"BF16\",\"shape\":[65536,32768],\"data_offsets\":[0,{bytes}]}}}}"
        );
        let mut file = std::fs::File::create(&path).unwrap();
        std::io::Write::write_all(&mut file, &(header.len() as u64).to_le_bytes()).unwrap();
        std::io::Write::write_all(&mut file, header.as_bytes()).unwrap();
        file.set_len(8 + header.len() as u64 + bytes).unwrap();
        drop(file);
        let e = entries(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(e[0].shape, vec![65536, 32768]);
        assert_eq!(e[0].bytes, bytes);
    }

    #[test]
    fn offsets_past_the_end_of_the_data_are_an_error_naming_the_tensor() {
        let path = temp("cut.safetensors");
        let w = Tensor::zeros(&[8], DType::F32, Device::Cpu).unwrap();
        crate::io::safetensors::save(&path, &[("w".to_string(), w)][..], None).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 4)
            .unwrap();
        let e = entries(&path).unwrap_err().to_string();
        std::fs::remove_file(&path).ok();
        assert!(e.contains("`w`") && e.contains("outside"), "{e}");
    }
}
