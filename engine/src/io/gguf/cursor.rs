//! A reader over untrusted bytes that knows how many remain: every read checks its length
//! against what is left of the file before it allocates, so a count of 2^60 in a corrupt header
//! is an error, not an allocation.

use super::format_error;
use crate::{Error, Result};
use std::io::Read;

pub(super) struct Cursor<R> {
    inner: R,
    pos: u64,
    len: u64,
    pub file: String,
}

impl<R: Read> Cursor<R> {
    pub fn new(inner: R, len: u64, file: String) -> Self {
        Cursor {
            inner,
            pos: 0,
            len,
            file,
        }
    }

    pub fn pos(&self) -> u64 {
        self.pos
    }

    pub fn remaining(&self) -> u64 {
        self.len - self.pos
    }

    pub fn error(&self, what: &str, msg: impl std::fmt::Display) -> Error {
        format_error(&self.file, format!("{what}: {msg}"))
    }

    /// Fails unless `n` more bytes are in the file.
    pub fn need(&self, n: u64, what: &str) -> Result<()> {
        if n > self.remaining() {
            return Err(self.error(
                what,
                format!(
                    "truncated: needs {n} bytes at offset {}, the file has {} left",
                    self.pos,
                    self.remaining()
                ),
            ));
        }
        Ok(())
    }

    /// Fails unless `count` items of at least `min_bytes` each fit in what is left of the file.
    pub fn check_count(&self, count: u64, min_bytes: u64, what: &str) -> Result<()> {
        if count
            .checked_mul(min_bytes)
            .is_none_or(|n| n > self.remaining())
        {
            return Err(self.error(
                what,
                format!(
                    "{count} entries need at least {min_bytes} bytes each, the file has {} left",
                    self.remaining()
                ),
            ));
        }
        Ok(())
    }

    pub fn bytes(&mut self, n: u64, what: &str) -> Result<Vec<u8>> {
        self.need(n, what)?;
        let mut buf = vec![0u8; n as usize];
        self.fill(&mut buf, what)?;
        Ok(buf)
    }

    fn fill(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        self.need(buf.len() as u64, what)?;
        self.inner
            .read_exact(buf)
            .map_err(|e| self.error(what, format!("read failed at offset {}: {e}", self.pos)))?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    pub fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut buf = [0u8; N];
        self.fill(&mut buf, what)?;
        Ok(buf)
    }

    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A GGUF string: a u64 byte length, then that many bytes of UTF-8.
    pub fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64(what)?;
        let bytes = self.bytes(n, what)?;
        String::from_utf8(bytes)
            .map_err(|e| self.error(what, format!("a string is not UTF-8: {e}")))
    }

    pub fn into_inner(self) -> R {
        self.inner
    }
}
