//! The two containers `torch.save` writes: a zip archive, or the legacy run of pickles.

use super::materialise::{Materialiser, NoStorages, StorageSource};
use super::pickle::{Node, Vm};
use super::storage::{torch_error, ElemType};
use super::value::Value;
use crate::{Error, Result};
use std::collections::HashMap;
use std::io::{Cursor, Read};
use std::path::Path;

/// The legacy format's first pickle: this integer.
const MAGIC: u128 = 0x1950a86a20f9469cfc6c;
/// The legacy format version that torch writes and reads.
const LEGACY_PROTOCOL: i64 = 1001;
/// The most a deflated zip entry may expand, relative to the whole file (deflate's own limit is
/// about 1032:1); torch stores entries uncompressed, so real files are far below it.
const MAX_INFLATE_RATIO: u64 = 1100;

/// Reads a `torch.save` file (zip or legacy format) into a [`Value`].
pub fn load_pt(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    load_pt_bytes(&bytes, &name)
}

/// Reads a `torch.save` file held in memory; `name` names it in errors.
pub fn load_pt_bytes(bytes: &[u8], name: &str) -> Result<Value> {
    if bytes.starts_with(b"PK\x03\x04") {
        load_zip(bytes, name)
    } else if bytes.first() == Some(&0x80) {
        load_legacy(bytes, name)
    } else {
        Err(torch_error(format!(
            "`{name}` is neither a torch zip archive nor a legacy torch.save file"
        )))
    }
}

// ----- zip -----

struct ZipStorages<'a> {
    archive: zip::ZipArchive<Cursor<&'a [u8]>>,
    prefix: String,
    file: &'a str,
    limit: u64,
    cache: HashMap<String, Vec<u8>>,
}

impl ZipStorages<'_> {
    fn read(&mut self, entry: &str) -> Result<Vec<u8>> {
        let file = self.file;
        let zip_err =
            |e: zip::result::ZipError| torch_error(format!("`{file}`: entry `{entry}`: {e}"));
        let mut f = self.archive.by_name(entry).map_err(zip_err)?;
        if f.size() > self.limit {
            return Err(torch_error(format!(
                "`{file}`: entry `{entry}` claims {} bytes, more than the file can hold",
                f.size()
            )));
        }
        let mut out = Vec::with_capacity(f.size() as usize);
        f.by_ref()
            .take(self.limit)
            .read_to_end(&mut out)
            .map_err(|e| torch_error(format!("`{file}`: entry `{entry}`: {e}")))?;
        Ok(out)
    }
}

impl StorageSource for ZipStorages<'_> {
    fn bytes(&mut self, key: &str) -> Result<&[u8]> {
        if !self.cache.contains_key(key) {
            let entry = format!("{}data/{key}", self.prefix);
            let data = self.read(&entry)?;
            self.cache.insert(key.to_string(), data);
        }
        Ok(self.cache.get(key).map(Vec::as_slice).unwrap_or(&[]))
    }
}

fn load_zip(bytes: &[u8], file: &str) -> Result<Value> {
    let archive = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| torch_error(format!("`{file}`: not a readable zip archive: {e}")))?;
    // The record folder is the one top-level folder that holds `data.pkl`.
    let prefix = (0..archive.len())
        .filter_map(|i| archive.name_for_index(i))
        .find_map(|n| {
            let root = n.strip_suffix("data.pkl")?;
            (root.ends_with('/') && root.matches('/').count() == 1).then(|| root.to_string())
        })
        .ok_or_else(|| torch_error(format!("`{file}`: zip archive without `<root>/data.pkl`")))?;
    let limit = (bytes.len() as u64).saturating_mul(MAX_INFLATE_RATIO);
    let mut storages = ZipStorages {
        archive,
        prefix,
        file,
        limit,
        cache: HashMap::new(),
    };
    let has = |s: &ZipStorages, name: &str| {
        s.archive
            .index_for_name(&format!("{}{name}", s.prefix))
            .is_some()
    };
    if has(&storages, "constants.pkl") {
        return Err(torch_error(format!(
            "`{file}` is a TorchScript archive, not a torch.save checkpoint"
        )));
    }
    if has(&storages, "byteorder") {
        let order = storages.read(&format!("{}byteorder", storages.prefix))?;
        if order != b"little" {
            return Err(torch_error(format!(
                "`{file}`: byte order `{}` is not supported (only little-endian)",
                String::from_utf8_lossy(&order)
            )));
        }
    }
    let pickle = storages.read(&format!("{}data.pkl", storages.prefix))?;
    let mut vm = Vm::new(&pickle, file);
    let root = vm.run(0)?;
    Materialiser::new(&vm, &mut storages).value(root)
}

// ----- legacy -----

/// Storages of a legacy file: byte ranges of the file, by key.
struct LegacyStorages<'a> {
    bytes: &'a [u8],
    ranges: HashMap<String, std::ops::Range<usize>>,
}

impl StorageSource for LegacyStorages<'_> {
    fn bytes(&mut self, key: &str) -> Result<&[u8]> {
        match self.ranges.get(key) {
            Some(r) => Ok(&self.bytes[r.clone()]),
            None => Err(torch_error(format!(
                "storage `{key}` is not in the file's storage list"
            ))),
        }
    }
}

fn load_legacy(bytes: &[u8], file: &str) -> Result<Value> {
    let mut header = Vm::new(bytes, file);
    let read_plain = |vm: &mut Vm, start: usize| -> Result<(Value, usize)> {
        let root = vm.run(start)?;
        let value = Materialiser::new(vm, &mut NoStorages(file)).value(root)?;
        Ok((value, vm.position()))
    };
    let (magic, pos) = read_plain(&mut header, 0)?;
    if !is_magic(&magic) {
        return Err(torch_error(format!(
            "`{file}` starts with a pickle but is not a torch.save file (bad magic number)"
        )));
    }
    let (version, pos) = read_plain(&mut header, pos)?;
    if version.as_i64() != Some(LEGACY_PROTOCOL) {
        return Err(torch_error(format!(
            "`{file}`: legacy protocol version {version:?}, expected {LEGACY_PROTOCOL}"
        )));
    }
    let (sys_info, pos) = read_plain(&mut header, pos)?;
    if sys_info.get("little_endian").and_then(Value::as_bool) == Some(false) {
        return Err(torch_error(format!(
            "`{file}` was saved big-endian; not supported"
        )));
    }

    let mut vm = Vm::new(bytes, file);
    let root = vm.run(pos)?;
    let (keys, mut pos) = read_plain(&mut header, vm.position())?;
    let keys = keys
        .as_list()
        .ok_or_else(|| torch_error(format!("`{file}`: storage key list is not a list")))?;

    // Each storage's element size comes from the pickle's references to it.
    let mut elem_of: HashMap<&str, ElemType> = HashMap::new();
    for node in &vm.arena {
        if let Node::Storage(s) = node {
            elem_of.insert(s.key.as_str(), s.elem);
        }
    }
    let mut ranges = HashMap::new();
    for key in keys {
        let key = match key {
            Value::Str(s) => s.clone(),
            Value::Int(i) => i.to_string(),
            other => {
                return Err(torch_error(format!(
                    "`{file}`: storage key is a {}",
                    other.kind()
                )))
            }
        };
        let elem = *elem_of.get(key.as_str()).ok_or_else(|| {
            torch_error(format!(
                "`{file}`: storage `{key}` is listed but never used"
            ))
        })?;
        let count_end = pos.checked_add(8).filter(|&e| e <= bytes.len());
        let count = count_end
            .and_then(|e| bytes[pos..e].try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| torch_error(format!("`{file}`: truncated before storage `{key}`")))?;
        let start = pos + 8;
        let end = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(elem.size()))
            .and_then(|n| start.checked_add(n))
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| {
                torch_error(format!(
                    "`{file}`: storage `{key}` of {count} elements runs past the end of the file"
                ))
            })?;
        ranges.insert(key, start..end);
        pos = end;
    }
    let mut storages = LegacyStorages { bytes, ranges };
    Materialiser::new(&vm, &mut storages).value(root)
}

fn is_magic(v: &Value) -> bool {
    match v {
        Value::BigInt(b) if b.len() <= 16 => {
            let mut buf = [0u8; 16];
            buf[..b.len()].copy_from_slice(b);
            u128::from_le_bytes(buf) == MAGIC
        }
        _ => false,
    }
}
