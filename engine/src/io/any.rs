//! Any checkpoint by its content: safetensors (one file, or the index of a sharded one),
//! PyTorch `.pt`/`.pth`/`.bin` (zip and legacy, through the restricted unpickler), GGUF
//! (dequantized to F32), NPY and NPZ. The file's first bytes decide, not its name, so a `.bin`
//! that is really safetensors, or a renamed file, loads as what it is.

use super::npy::{parse_npy, read_npy};
use super::{gguf, safetensors, torch};
use crate::{Error, Result, Tensor};
use std::io::Read;
use std::path::Path;

/// The formats `load_any` tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Safetensors,
    SafetensorsIndex,
    TorchZip,
    TorchLegacy,
    Gguf,
    Npy,
}

/// What the first bytes of a file say it is.
pub fn sniff(head: &[u8]) -> Option<Format> {
    if head.starts_with(b"GGUF") {
        return Some(Format::Gguf);
    }
    if head.starts_with(b"\x93NUMPY") {
        return Some(Format::Npy);
    }
    if head.starts_with(b"PK\x03\x04") {
        // A zip: torch's archive holds `<root>/data.pkl`, an NPZ only `.npy` entries; told
        // apart by the entry names once the archive is open (`load_any`).
        return Some(Format::TorchZip);
    }
    // Pickle protocol 2 with the legacy magic number as its first value (a LONG1).
    if head.starts_with(b"\x80\x02\x8a\x0a") {
        return Some(Format::TorchLegacy);
    }
    if head.first() == Some(&b'{') {
        return Some(Format::SafetensorsIndex);
    }
    // safetensors: an 8-byte little-endian header length, then the JSON header.
    if head.len() > 8 && head[8] == b'{' {
        return Some(Format::Safetensors);
    }
    None
}

/// Every tensor in the file at `path`, with dotted names: a nested dict (a training
/// checkpoint's `{"model": {...}, "optimizer": {...}}`) or a pickled module gives
/// `model.layer.weight`; values that are not tensors (epochs, strings) are left out.
pub fn load_any(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    let mut head = [0u8; 16];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| Error::io(path, e))?;
    let format = sniff(&head[..n]).ok_or_else(|| {
        Error::format(
            "io::load",
            format!(
                "{}: not a checkpoint this reads (safetensors, a safetensors index, PyTorch .pt/.pth/.bin, GGUF, NPY or NPZ)",
                path.display()
            ),
        )
    })?;
    match format {
        Format::Safetensors => Ok(safetensors::load(path)?.into_iter().collect()),
        Format::SafetensorsIndex => Ok(safetensors::load_sharded(path)?.into_iter().collect()),
        Format::TorchZip if is_npz(path)? => load_npz(path),
        Format::TorchZip | Format::TorchLegacy => {
            let mut out = Vec::new();
            flatten(&torch::load_pt(path)?, "", 0, &mut out)?;
            Ok(out)
        }
        Format::Npy => {
            let name = path
                .file_stem()
                .map_or("array".into(), |s| s.to_string_lossy().to_string());
            Ok(vec![(name, read_npy(path)?)])
        }
        Format::Gguf => {
            let mut file = gguf::GgufFile::open(path)?;
            let names: Vec<String> = file.tensors.iter().map(|t| t.name.clone()).collect();
            names
                .into_iter()
                .map(|n| Ok((n.clone(), file.tensor(&n)?)))
                .collect()
        }
    }
}

/// Writes named tensors in the format the extension names: `.pt`, `.pth` and `.bin` as a
/// PyTorch state dict (`torch.load` gives an OrderedDict of name to tensor, as
/// `torch.save(model.state_dict())` writes), anything else as safetensors.
pub fn save_by_extension(path: impl AsRef<Path>, tensors: &[(String, Tensor)]) -> Result<()> {
    let path = path.as_ref();
    let torch_format = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "pt" | "pth" | "bin"));
    if torch_format {
        let dict = tensors
            .iter()
            .map(|(n, t)| {
                (
                    torch::PyObject::Str(n.clone()),
                    torch::PyObject::Tensor(t.clone()),
                )
            })
            .collect();
        torch::save_pt(path, &torch::PyObject::OrderedDict(dict))
    } else {
        safetensors::save(path, tensors, None)
    }
}

/// A table of the file's tensors: name, shape, dtype and bytes, one line each, then the total
/// (what `io::inspect` prints).
pub fn inspect(path: impl AsRef<Path>) -> Result<String> {
    Ok(super::inspect::table(&super::inspect::entries(
        path.as_ref(),
    )?))
}

/// A zip whose entries are all `.npy` arrays.
fn is_npz(path: &Path) -> Result<bool> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let archive = zip::ZipArchive::new(file)
        .map_err(|e| Error::format("io::load", format!("{}: {e}", path.display())))?;
    Ok(!archive.is_empty() && archive.file_names().all(|n| n.ends_with(".npy")))
}

/// numpy's `savez`: one `.npy` per array, named by its entry without the extension.
fn load_npz(path: &Path) -> Result<Vec<(String, Tensor)>> {
    let bad = |e: String| Error::format("io::load", format!("{}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(|e| bad(e.to_string()))?;
        let name = entry.name().trim_end_matches(".npy").to_string();
        // The entry's size is read from the archive, which the file's length bounds only for
        // stored entries: a compressed one could claim more than it holds, so read with a cap.
        let mut bytes = Vec::new();
        entry
            .by_ref()
            .take(MAX_NPZ_ENTRY)
            .read_to_end(&mut bytes)
            .map_err(|e| bad(format!("{name}: {e}")))?;
        out.push((name, parse_npy(&bytes)?));
    }
    Ok(out)
}

/// 16 GiB: an array larger than this in an NPZ is refused rather than read.
const MAX_NPZ_ENTRY: u64 = 16 << 30;

/// Nested dicts and pickled modules are bounded in depth, as a hostile file could nest without end.
const MAX_DEPTH: usize = 200;

/// The tensors inside a loaded pickle with dotted names.
fn flatten(
    value: &torch::Value,
    prefix: &str,
    depth: usize,
    out: &mut Vec<(String, Tensor)>,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(Error::format(
            "io::load",
            format!("{prefix}: nested deeper than {MAX_DEPTH} levels"),
        ));
    }
    let join = |key: &str| match prefix {
        "" => key.to_string(),
        _ => format!("{prefix}.{key}"),
    };
    match value {
        torch::Value::Tensor(t) => out.push((prefix.to_string(), t.clone())),
        torch::Value::Dict(items) => {
            for (k, v) in items {
                let key = match k {
                    torch::Value::Str(s) => s.clone(),
                    torch::Value::Int(i) => i.to_string(),
                    _ => continue,
                };
                flatten(v, &join(&key), depth + 1, out)?;
            }
        }
        torch::Value::List(items) | torch::Value::Tuple(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten(v, &join(&i.to_string()), depth + 1, out)?;
            }
        }
        torch::Value::Object { .. } => {
            for (name, t) in torch::module_state_dict(value)? {
                out.push((join(&name), t));
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_name_the_format() {
        assert_eq!(sniff(b"GGUF\x03\0\0\0"), Some(Format::Gguf));
        assert_eq!(sniff(b"\x93NUMPY\x01\0"), Some(Format::Npy));
        assert_eq!(sniff(b"PK\x03\x04...."), Some(Format::TorchZip));
        assert_eq!(
            sniff(b"\x80\x02\x8a\x0al\xfc\x9cF"),
            Some(Format::TorchLegacy)
        );
        assert_eq!(sniff(b"{\"metadata\": "), Some(Format::SafetensorsIndex));
        assert_eq!(
            sniff(b"\x40\0\0\0\0\0\0\0{\"w\":"),
            Some(Format::Safetensors)
        );
        assert_eq!(sniff(b"hello world, no"), None);
    }

    #[test]
    fn a_file_of_another_kind_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.txt");
        std::fs::write(&path, "just some text").unwrap();
        let err = load_any(&path).unwrap_err().to_string();
        assert!(err.contains("not a checkpoint this reads"), "{err}");
    }

    #[test]
    fn a_pt_extension_writes_a_torch_state_dict_that_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let t = Tensor::from_vec(vec![1f32, -2.0, 3.5], &[3]).unwrap();
        let named = vec![("layer.weight".to_string(), t)];
        for name in ["model.pt", "model.safetensors"] {
            let path = dir.path().join(name);
            save_by_extension(&path, &named).unwrap();
            let mut head = [0u8; 4];
            std::fs::File::open(&path)
                .unwrap()
                .read_exact(&mut head)
                .unwrap();
            let zip = &head == b"PK\x03\x04";
            assert_eq!(zip, name.ends_with(".pt"), "{name}");
            let loaded = load_any(&path).unwrap();
            assert_eq!(loaded[0].0, "layer.weight");
            assert_eq!(loaded[0].1.to_vec_f32().unwrap(), [1.0, -2.0, 3.5]);
        }
    }

    #[test]
    fn safetensors_renamed_to_bin_loads_by_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pytorch_model.bin");
        let t = Tensor::from_vec(vec![1f32, 2.0], &[2]).unwrap();
        safetensors::save(&path, &[("w".to_string(), t)][..], None).unwrap();
        let loaded = load_any(&path).unwrap();
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].0, "w");
    }
}
