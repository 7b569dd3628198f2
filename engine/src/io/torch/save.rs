//! The zip container `torch.save` writes (torch >= 1.6), around a pickle from
//! [`super::pickle_writer`]:
//!
//! ```text
//! archive/data.pkl                 the pickle
//! archive/.format_version          "1"
//! archive/.storage_alignment       "64"
//! archive/byteorder                "little"
//! archive/data/<key>               each storage's raw bytes, in key order
//! archive/version                  "3\n"
//! archive/.data/serialization_id   an id of this file's contents
//! ```
//!
//! Every entry is stored uncompressed with its data starting on a 64-byte boundary (torch pads
//! the local header's extra field), so `torch.load(mmap=True)` can map the storages in place.

use super::pickle_writer::{pickle, PyObject};
use super::storage::torch_error;
use crate::io::temp_file::TempFile;
use crate::{Error, Result};
use std::io::{Cursor, Seek, Write};
use std::path::Path;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

/// The record folder torch names when it saves to a buffer; loaders accept any single folder.
const ROOT: &str = "archive";
/// torch's default storage alignment (`torch.utils.serialization.config.save.storage_alignment`).
const ALIGNMENT: u16 = 64;
/// The serialization format version torch writes and reads.
const VERSION: &str = "3\n";

/// Writes `obj` as a `torch.save` checkpoint at `path` (atomically: a temporary beside it,
/// then a rename). Missing parent folders are created.
pub fn save_pt(path: &Path, obj: &PyObject) -> Result<()> {
    crate::io::temp_file::create_parent(path)?;
    let tmp = TempFile::beside(path);
    let file = std::fs::File::create(tmp.path()).map_err(|e| Error::io(path, e))?;
    let mut w = std::io::BufWriter::new(file);
    write_archive(&mut w, obj).map_err(|e| match e {
        ArchiveError::Io(e) => Error::io(path, e),
        ArchiveError::Other(e) => e,
    })?;
    let file = w
        .into_inner()
        .map_err(|e| Error::io(path, e.into_error()))?;
    file.sync_all().map_err(|e| Error::io(path, e))?;
    drop(file);
    tmp.persist(path)
}

/// The bytes of a `torch.save` checkpoint holding `obj`.
pub fn save_pt_bytes(obj: &PyObject) -> Result<Vec<u8>> {
    let mut out = Cursor::new(Vec::new());
    write_archive(&mut out, obj).map_err(|e| match e {
        ArchiveError::Io(e) => torch_error(format!("writing to memory: {e}")),
        ArchiveError::Other(e) => e,
    })?;
    Ok(out.into_inner())
}

/// A failure to write (named by the caller with its path) or a bad object.
enum ArchiveError {
    Io(std::io::Error),
    Other(Error),
}

impl From<std::io::Error> for ArchiveError {
    fn from(e: std::io::Error) -> Self {
        ArchiveError::Io(e)
    }
}

impl From<zip::result::ZipError> for ArchiveError {
    fn from(e: zip::result::ZipError) -> Self {
        match e {
            zip::result::ZipError::Io(e) => ArchiveError::Io(e),
            other => ArchiveError::Other(torch_error(format!("zip: {other}"))),
        }
    }
}

fn write_archive<W: Write + Seek>(w: W, obj: &PyObject) -> std::result::Result<(), ArchiveError> {
    let pickled = pickle(obj).map_err(ArchiveError::Other)?;
    let mut zip = ZipWriter::new(w);
    let record = |zip: &mut ZipWriter<W>, name: &str, bytes: &[u8]| {
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Stored)
            .last_modified_time(zip::DateTime::default())
            .with_alignment(ALIGNMENT)
            .large_file(bytes.len() as u64 >= u32::MAX as u64);
        zip.start_file(format!("{ROOT}/{name}"), options)?;
        zip.write_all(bytes)?;
        std::result::Result::<(), ArchiveError>::Ok(())
    };
    record(&mut zip, "data.pkl", &pickled.pickle)?;
    record(&mut zip, ".format_version", b"1")?;
    record(
        &mut zip,
        ".storage_alignment",
        ALIGNMENT.to_string().as_bytes(),
    )?;
    record(&mut zip, "byteorder", b"little")?;
    let mut id = ContentId::default();
    id.add(&pickled.pickle);
    for s in &pickled.storages {
        record(&mut zip, &format!("data/{}", s.key), &s.bytes)?;
        id.add(&s.bytes);
    }
    record(&mut zip, "version", VERSION.as_bytes())?;
    record(&mut zip, ".data/serialization_id", id.decimal().as_bytes())?;
    zip.finish()?;
    Ok(())
}

/// torch records a 40-digit decimal id per saved file; this one is a hash of the contents
/// (two FNV-1a streams), so saving the same object twice gives the same bytes.
struct ContentId([u64; 2]);

impl Default for ContentId {
    fn default() -> Self {
        ContentId([0xcbf2_9ce4_8422_2325, 0x8422_2325_cbf2_9ce4])
    }
}

impl ContentId {
    fn add(&mut self, bytes: &[u8]) {
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        for &b in bytes {
            self.0[0] = (self.0[0] ^ b as u64).wrapping_mul(PRIME);
            self.0[1] = (self.0[1] ^ (b as u64).rotate_left(17)).wrapping_mul(PRIME);
        }
    }

    fn decimal(&self) -> String {
        // A u64 has at most 20 decimal digits.
        format!("{:020}{:020}", self.0[0], self.0[1])
    }
}
