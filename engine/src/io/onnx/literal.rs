//! Python literals, as ultralytics writes them into ONNX metadata (`str(dict)`): dicts, lists,
//! tuples, sets, ints, floats, strings with either quote and backslash escapes, `True`, `False`
//! and `None`; the subset of `ast.literal_eval` that `repr` of plain data produces.

use crate::io::torch::Value;
use crate::{Error, Result};

/// Deepest nesting accepted; metadata nests two or three levels.
const MAX_DEPTH: usize = 100;

/// Parses one Python literal, e.g. `{0: 'person', 1: 'bicycle'}` or `[640, 640]`.
pub fn parse_python_literal(s: &str) -> Result<Value> {
    let mut p = Parser {
        chars: s.chars().collect(),
        pos: 0,
    };
    let v = p.value(0)?;
    p.skip_space();
    if p.pos < p.chars.len() {
        return Err(p.error("unexpected text after the value"));
    }
    Ok(v)
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn error(&self, msg: &str) -> Error {
        Error::format("python literal", format!("{msg} at character {}", self.pos))
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    /// Consumes `c` after optional whitespace, if it is next.
    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value> {
        if depth > MAX_DEPTH {
            return Err(self.error("nesting too deep"));
        }
        self.skip_space();
        match self.peek() {
            Some('{') => self.braces(depth),
            Some('[') => {
                self.pos += 1;
                Ok(Value::List(self.items(']', depth)?.0))
            }
            Some('(') => {
                self.pos += 1;
                let (items, trailing_comma) = self.items(')', depth)?;
                // `(x)` is just x; `(x,)` and `()` are tuples.
                Ok(match (items.len(), trailing_comma) {
                    (1, false) => items.into_iter().next().unwrap_or(Value::None),
                    _ => Value::Tuple(items),
                })
            }
            Some('\'' | '"') => self.strings(),
            Some(c) if c.is_ascii_digit() || matches!(c, '-' | '+' | '.') => self.number(),
            Some(c) if c.is_alphabetic() => {
                let start = self.pos;
                while self.peek().is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    self.pos += 1;
                }
                let word: String = self.chars[start..self.pos].iter().collect();
                match word.as_str() {
                    "True" => Ok(Value::Bool(true)),
                    "False" => Ok(Value::Bool(false)),
                    "None" => Ok(Value::None),
                    _ => {
                        self.pos = start;
                        Err(self.error(&format!("`{word}` is not a literal")))
                    }
                }
            }
            Some(_) => Err(self.error("unexpected character")),
            None => Err(self.error("unexpected end of text")),
        }
    }

    /// Comma-separated values up to `close`; also whether a comma came last.
    fn items(&mut self, close: char, depth: usize) -> Result<(Vec<Value>, bool)> {
        let mut items = Vec::new();
        let mut comma = false;
        loop {
            if self.eat(close) {
                return Ok((items, comma));
            }
            if !items.is_empty() && !comma {
                return Err(self.error(&format!("expected `,` or `{close}`")));
            }
            items.push(self.value(depth + 1)?);
            comma = self.eat(',');
        }
    }

    /// `{}` (an empty dict), `{k: v, ...}` or `{a, b}` (a set).
    fn braces(&mut self, depth: usize) -> Result<Value> {
        self.pos += 1;
        if self.eat('}') {
            return Ok(Value::Dict(Vec::new()));
        }
        let first = self.value(depth + 1)?;
        if !self.eat(':') {
            let mut items = vec![first];
            if self.eat(',') {
                items.extend(self.items('}', depth)?.0);
            } else if !self.eat('}') {
                return Err(self.error("expected `,`, `:` or `}`"));
            }
            return Ok(Value::Set(items));
        }
        let mut entries = vec![(first, self.value(depth + 1)?)];
        loop {
            if self.eat('}') {
                return Ok(Value::Dict(entries));
            }
            if !self.eat(',') {
                return Err(self.error("expected `,` or `}`"));
            }
            if self.eat('}') {
                return Ok(Value::Dict(entries));
            }
            let key = self.value(depth + 1)?;
            if !self.eat(':') {
                return Err(self.error("expected `:`"));
            }
            entries.push((key, self.value(depth + 1)?));
        }
    }

    /// One or more adjacent string literals, concatenated as Python does.
    fn strings(&mut self) -> Result<Value> {
        let mut out = String::new();
        loop {
            self.string(&mut out)?;
            self.skip_space();
            if !matches!(self.peek(), Some('\'' | '"')) {
                return Ok(Value::Str(out));
            }
        }
    }

    fn string(&mut self, out: &mut String) -> Result<()> {
        let quote = self.peek().ok_or_else(|| self.error("expected a string"))?;
        self.pos += 1;
        loop {
            let c = self
                .peek()
                .ok_or_else(|| self.error("unterminated string"))?;
            self.pos += 1;
            match c {
                c if c == quote => return Ok(()),
                '\\' => self.escape(out)?,
                c => out.push(c),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<()> {
        let c = self
            .peek()
            .ok_or_else(|| self.error("unterminated escape"))?;
        self.pos += 1;
        let simple = match c {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            '0' => Some('\0'),
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'f' => Some('\x0c'),
            'v' => Some('\x0b'),
            '\\' | '\'' | '"' => Some(c),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            return Ok(());
        }
        let digits = match c {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            '\n' => return Ok(()), // a line continuation
            _ => {
                // Python keeps unknown escapes as written.
                out.push('\\');
                out.push(c);
                return Ok(());
            }
        };
        let end = self.pos + digits;
        let hex: String = self
            .chars
            .get(self.pos..end)
            .ok_or_else(|| self.error("truncated escape"))?
            .iter()
            .collect();
        let code = u32::from_str_radix(&hex, 16).map_err(|_| self.error("bad hex escape"))?;
        let ch = char::from_u32(code).ok_or_else(|| self.error("escape is not a character"))?;
        out.push(ch);
        self.pos = end;
        Ok(())
    }

    fn number(&mut self) -> Result<Value> {
        let start = self.pos;
        if matches!(self.peek(), Some('-' | '+')) {
            self.pos += 1;
        }
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_'))
            || (matches!(self.peek(), Some('-' | '+'))
                && self.pos > start
                && matches!(self.chars.get(self.pos - 1), Some('e' | 'E')))
        {
            self.pos += 1;
        }
        let text: String = self.chars[start..self.pos]
            .iter()
            .filter(|&&c| c != '_')
            .collect();
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Value::Int(i));
        }
        let is_float = text.contains(['.', 'e', 'E']) && !text.contains(['x', 'X']);
        match text.parse::<f64>() {
            Ok(f) if is_float => Ok(Value::Float(f)),
            _ => {
                self.pos = start;
                Err(self.error(&format!("`{text}` is not a supported number")))
            }
        }
    }
}
