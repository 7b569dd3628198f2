//! Splitting CSV bytes into records of raw field bytes (RFC 4180: quoted fields may hold the
//! delimiter, line breaks and doubled quotes; LF, CRLF or lone CR end lines).

use crate::{Error, Result};

/// Splits the input into records of raw field bytes.
pub(super) struct Records<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
    /// The 1-based line the read position is on.
    pub(super) line: usize,
    pub(super) delimiter: u8,
}

enum FieldEnd {
    Delimiter,
    LineOrEof,
}

impl Records<'_> {
    /// Reads the next non-blank record into `fields` and returns the line it starts on, or
    /// `None` at the end of the input.
    pub(super) fn next_into(&mut self, fields: &mut Vec<Vec<u8>>) -> Result<Option<usize>> {
        fields.clear();
        while let Some(&b) = self.bytes.get(self.pos) {
            if b != b'\n' && b != b'\r' {
                break;
            }
            self.end_of_line();
        }
        if self.pos >= self.bytes.len() {
            return Ok(None);
        }
        let start = self.line;
        loop {
            let mut field = Vec::new();
            let end = self.field(&mut field, start)?;
            fields.push(field);
            if let FieldEnd::LineOrEof = end {
                return Ok(Some(start));
            }
        }
    }

    fn field(&mut self, out: &mut Vec<u8>, record_line: usize) -> Result<FieldEnd> {
        if self.bytes.get(self.pos) == Some(&b'"') {
            self.pos += 1;
            self.quoted(out, record_line)?;
            return match self.bytes.get(self.pos) {
                Some(&b) if b == self.delimiter => {
                    self.pos += 1;
                    Ok(FieldEnd::Delimiter)
                }
                Some(b'\n' | b'\r') | None => {
                    self.end_of_line();
                    Ok(FieldEnd::LineOrEof)
                }
                Some(&b) => Err(Error::format(
                    "csv",
                    format!(
                        "line {}: unexpected {:?} after a closing quote",
                        self.line, b as char
                    ),
                )),
            };
        }
        while let Some(&b) = self.bytes.get(self.pos) {
            if b == self.delimiter {
                self.pos += 1;
                return Ok(FieldEnd::Delimiter);
            }
            if b == b'\n' || b == b'\r' {
                self.end_of_line();
                return Ok(FieldEnd::LineOrEof);
            }
            out.push(b);
            self.pos += 1;
        }
        Ok(FieldEnd::LineOrEof)
    }

    /// The body of a quoted field, up to and past its closing quote.
    fn quoted(&mut self, out: &mut Vec<u8>, record_line: usize) -> Result<()> {
        while let Some(&b) = self.bytes.get(self.pos) {
            self.pos += 1;
            match b {
                b'"' if self.bytes.get(self.pos) == Some(&b'"') => {
                    out.push(b'"');
                    self.pos += 1;
                }
                b'"' => return Ok(()),
                _ => {
                    if b == b'\n' {
                        self.line += 1;
                    }
                    out.push(b);
                }
            }
        }
        Err(Error::format(
            "csv",
            format!("a quoted field in the record starting on line {record_line} is never closed"),
        ))
    }

    /// Consumes one LF, CRLF or lone CR.
    fn end_of_line(&mut self) {
        if self.bytes.get(self.pos) == Some(&b'\r') {
            self.pos += 1;
        }
        if self.bytes.get(self.pos) == Some(&b'\n') {
            self.pos += 1;
        }
        self.line += 1;
    }
}
