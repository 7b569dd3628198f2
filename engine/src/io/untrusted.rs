//! Reading binary formats whose bytes come from outside: a bounds-checked cursor, shape checks
//! and element decoding shared by the NPY and IDX readers.
//!
//! The rule every reader follows: a size the file declares is only a claim. Before anything is
//! allocated, the claimed element count (with checked multiplication) times the element size must
//! equal the bytes that are actually there. Then no corrupt header can make us allocate more
//! than the file's own size, and no slice index can run past the end.

use crate::{Error, Result};

/// A read position over a byte slice; every read checks the remaining length first.
pub(crate) struct Cursor<'a> {
    format: &'static str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(format: &'static str, bytes: &'a [u8]) -> Self {
        Cursor {
            format,
            bytes,
            pos: 0,
        }
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes; `what` names the field in the error when the file ends early.
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::format(
                self.format,
                format!(
                    "file ends inside the {what}: needs {n} bytes at offset {}, only {} left",
                    self.pos,
                    self.remaining()
                ),
            ));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    /// Everything after the header, which must hold exactly `numel` elements of `elem_size`
    /// bytes. Checked before the caller decodes (and so allocates) anything.
    pub fn payload(mut self, numel: usize, elem_size: usize) -> Result<&'a [u8]> {
        let needed = numel.checked_mul(elem_size).ok_or_else(|| {
            Error::format(
                self.format,
                format!("{numel} elements of {elem_size} bytes overflow the address space"),
            )
        })?;
        let have = self.remaining();
        if needed != have {
            let how = if needed > have {
                "the file is truncated or the header is corrupt"
            } else {
                "there are trailing bytes after the data"
            };
            return Err(Error::format(
                self.format,
                format!("the header declares {numel} elements ({needed} bytes) but {have} bytes follow it; {how}"),
            ));
        }
        self.take(needed, "data")
    }
}

/// The element count of `shape`, refusing shapes whose size overflows. Dimensions of zero are
/// skipped when checking the overflow, because the tensor code computes strides and inner
/// sizes over the non-zero dimensions: `(0, 2^40, 2^40)` holds no elements but would still
/// overflow those products.
pub(crate) fn checked_numel(format: &'static str, shape: &[usize]) -> Result<usize> {
    let too_large = || Error::format(format, format!("shape {shape:?} is too large"));
    let mut span: usize = 1;
    for &d in shape {
        span = span.checked_mul(d.max(1)).ok_or_else(too_large)?;
    }
    if span > isize::MAX as usize {
        return Err(too_large());
    }
    Ok(if shape.contains(&0) { 0 } else { span })
}

/// Decodes fixed-size elements from `bytes` (whose length the caller checked to be a multiple of
/// `N`). The output length equals `bytes.len() / N`, so allocation follows the file's size.
pub(crate) fn decode<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            f(a)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_past_the_end_is_a_format_error() {
        let mut c = Cursor::new("npy", &[1, 2, 3]);
        assert_eq!(c.take(2, "magic").unwrap(), &[1, 2]);
        let err = c.take(2, "magic").unwrap_err().to_string();
        assert!(err.contains("npy") && err.contains("magic"), "{err}");
    }

    #[test]
    fn payload_must_match_the_declared_size_exactly() {
        let bytes = [0u8; 8];
        assert_eq!(Cursor::new("idx", &bytes).payload(2, 4).unwrap().len(), 8);
        assert!(Cursor::new("idx", &bytes).payload(3, 4).is_err());
        assert!(Cursor::new("idx", &bytes).payload(1, 4).is_err());
        assert!(Cursor::new("idx", &bytes).payload(usize::MAX, 4).is_err());
    }

    #[test]
    fn checked_numel_refuses_overflow_even_with_a_zero_dimension() {
        assert_eq!(checked_numel("idx", &[2, 3]).unwrap(), 6);
        assert_eq!(checked_numel("idx", &[]).unwrap(), 1);
        assert_eq!(checked_numel("idx", &[0, 5]).unwrap(), 0);
        assert!(checked_numel("idx", &[0, 1 << 40, 1 << 40]).is_err());
        assert!(checked_numel("idx", &[usize::MAX, 2]).is_err());
    }

    #[test]
    fn decode_reads_every_whole_element() {
        let v = decode::<2, u16>(&[1, 0, 2, 0], u16::from_le_bytes);
        assert_eq!(v, vec![1, 2]);
    }
}
