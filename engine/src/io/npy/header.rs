//! The header dict of an `.npy` file, parsed by hand rather than evaluated: just enough of
//! Python's literal syntax for its three keys.

use super::Elem;
use crate::{Error, Result};

/// The three keys of the header dict.
pub(super) struct Header {
    pub elem: Elem,
    pub fortran_order: bool,
    pub shape: Vec<usize>,
}

impl Header {
    pub fn parse(text: &str) -> Result<Header> {
        let mut p = DictParser {
            s: text.as_bytes(),
            pos: 0,
        };
        let (mut elem, mut fortran, mut shape) = (None, None, None);
        p.expect(b'{')?;
        loop {
            if p.eat(b'}') {
                break;
            }
            let key = p.string()?;
            p.expect(b':')?;
            match key {
                "descr" => elem = Some(Elem::parse(p.string()?)?),
                "fortran_order" => fortran = Some(p.boolean()?),
                "shape" => shape = Some(p.tuple()?),
                other => return Err(bad_header(format!("unexpected key {other:?}"))),
            }
            if !p.eat(b',') {
                p.expect(b'}')?;
                break;
            }
        }
        p.skip_ws();
        if p.pos != p.s.len() {
            return Err(bad_header("text after the closing brace".into()));
        }
        match (elem, fortran, shape) {
            (Some(elem), Some(fortran_order), Some(shape)) => Ok(Header {
                elem,
                fortran_order,
                shape,
            }),
            _ => Err(bad_header(
                "it needs the keys 'descr', 'fortran_order' and 'shape'".into(),
            )),
        }
    }
}

pub(super) fn bad_header(msg: String) -> Error {
    Error::format("npy", format!("bad header dict: {msg}"))
}

/// Just enough of Python's literal syntax for the header: quoted strings, True/False and
/// tuples of non-negative integers.
struct DictParser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> DictParser<'a> {
    fn skip_ws(&mut self) {
        while self
            .s
            .get(self.pos)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.pos += 1;
        }
    }

    /// Skips whitespace, then consumes `b` if it is next.
    fn eat(&mut self, b: u8) -> bool {
        self.skip_ws();
        let hit = self.s.get(self.pos) == Some(&b);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn expect(&mut self, b: u8) -> Result<()> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(bad_header(format!(
                "expected {:?} at offset {}",
                b as char, self.pos
            )))
        }
    }

    fn string(&mut self) -> Result<&'a str> {
        self.skip_ws();
        let quote = match self.s.get(self.pos) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => {
                return Err(bad_header(format!(
                    "expected a quoted string at offset {}",
                    self.pos
                )))
            }
        };
        let start = self.pos + 1;
        let len = self.s[start..]
            .iter()
            .position(|&b| b == quote)
            .ok_or_else(|| bad_header("unterminated string".into()))?;
        self.pos = start + len + 1;
        std::str::from_utf8(&self.s[start..start + len])
            .map_err(|_| bad_header("a string is not valid text".into()))
    }

    fn boolean(&mut self) -> Result<bool> {
        self.skip_ws();
        for (word, value) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.pos..].starts_with(word) {
                self.pos += word.len();
                return Ok(value);
            }
        }
        Err(bad_header("fortran_order must be True or False".into()))
    }

    fn tuple(&mut self) -> Result<Vec<usize>> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            if self.eat(b')') {
                return Ok(dims);
            }
            // A header line is short, so the dims it can hold are few; still, refuse absurd
            // ranks instead of growing a list from the file.
            if dims.len() >= 64 {
                return Err(bad_header("the shape has more than 64 dimensions".into()));
            }
            dims.push(self.integer()?);
            if !self.eat(b',') {
                self.expect(b')')?;
                return Ok(dims);
            }
        }
    }

    fn integer(&mut self) -> Result<usize> {
        self.skip_ws();
        let start = self.pos;
        while self.s.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        let digits = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
        let value = digits
            .parse::<usize>()
            .map_err(|_| bad_header(format!("a shape entry at offset {start} is not a size")))?;
        // Python 2 wrote long integers with an L suffix.
        if self.s.get(self.pos) == Some(&b'L') {
            self.pos += 1;
        }
        Ok(value)
    }
}
