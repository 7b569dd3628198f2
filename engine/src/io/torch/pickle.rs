//! A pickle virtual machine that only builds data.
//!
//! It runs the opcodes of protocols 0-5 that `torch.save` and Python 2/3 picklers emit, into an
//! arena of nodes: containers hold node ids, so an object that the memo shares and that is later
//! mutated (a dict filled after it was memoized) is seen the same from everywhere, as in Python.
//! Globals go through the allow-list when they are referenced; calls (`REDUCE`, `NEWOBJ`) and
//! `BUILD` are interpreted by `reduce.rs` and never run code. Every length is checked against the
//! remaining input before anything is allocated, so corrupt input gives an error, not a panic.

use super::globals::{classify, GlobalKind};
use super::storage::{torch_error, StorageRef, TensorSpec};
use super::value::Value;
use crate::Result;
use std::collections::HashMap;

/// An index into the arena.
pub(super) type Id = usize;

/// One object of the pickle's object graph.
#[derive(Clone, Debug)]
pub(super) enum Node {
    /// An immutable scalar: None, bool, int, float, str, bytes.
    Leaf(Value),
    Global {
        name: String,
        kind: GlobalKind,
    },
    Tuple(Vec<Id>),
    List(Vec<Id>),
    Dict(Vec<(Id, Id)>),
    Set(Vec<Id>),
    Object {
        class: String,
        args: Vec<Id>,
        state: Option<Id>,
    },
    Storage(StorageRef),
    Tensor(TensorSpec),
    /// A `numpy.dtype`: its type code (`f8`) and byte order (`<`, `>`, `|`, `=`).
    NumpyDtype {
        code: String,
        order: char,
    },
}

/// The machine's state while it runs one pickle.
pub(super) struct Vm<'a> {
    data: &'a [u8],
    pos: usize,
    /// The file's name, for error messages.
    pub(super) file: &'a str,
    pub(super) arena: Vec<Node>,
    stack: Vec<Id>,
    marks: Vec<usize>,
    memo: HashMap<u32, Id>,
    /// Entries copied from one container into another (BUILD's attribute update, a state's
    /// merge, a list turned into a set): bounded by the pickle's size, so a few bytes that
    /// copy a state onto itself again and again cannot double it into gigabytes.
    copied: usize,
}

impl<'a> Vm<'a> {
    /// Counts `n` entries copied; an error once the copies outgrow the pickle's bytes.
    pub(super) fn charge_copies(&mut self, n: usize) -> Step<()> {
        self.copied = self.copied.saturating_add(n);
        if self.copied > self.data.len() {
            return Err(format!(
                "the pickle copies more entries ({}) than its {} bytes could hold (an object's \
                 state added to itself over and over?)",
                self.copied,
                self.data.len()
            ));
        }
        Ok(())
    }

    pub(super) fn new(data: &'a [u8], file: &'a str) -> Self {
        Vm {
            data,
            pos: 0,
            file,
            arena: Vec::new(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            copied: 0,
        }
    }

    /// Where the last pickle ended: the byte after its `STOP`.
    pub(super) fn position(&self) -> usize {
        self.pos
    }

    /// Runs one pickle starting at byte `start` and returns its root object.
    pub(super) fn run(&mut self, start: usize) -> Result<Id> {
        self.pos = start;
        self.stack.clear();
        self.marks.clear();
        self.memo.clear();
        loop {
            let at = self.pos;
            let op = self.byte().map_err(|_| {
                self.error(format!("truncated at byte {at}: the pickle has no STOP"))
            })?;
            if let Some(root) = self
                .step(op)
                .map_err(|msg| self.error(format!("at byte {at} (opcode 0x{op:02x}): {msg}")))?
            {
                return Ok(root);
            }
        }
    }

    pub(super) fn error(&self, msg: impl std::fmt::Display) -> crate::Error {
        torch_error(format!("`{}`: {msg}", self.file))
    }

    pub(super) fn push_node(&mut self, node: Node) -> Id {
        self.arena.push(node);
        self.arena.len() - 1
    }

    fn push(&mut self, node: Node) {
        let id = self.push_node(node);
        self.stack.push(id);
    }

    fn leaf(&mut self, v: Value) {
        self.push(Node::Leaf(v));
    }

    /// Executes one opcode; `Some(root)` at `STOP`.
    fn step(&mut self, op: u8) -> Step<Option<Id>> {
        match op {
            0x80 => {
                let proto = self.byte()?;
                if proto > 5 {
                    return Err(format!("pickle protocol {proto} is newer than 5"));
                }
            }
            0x95 => {
                self.take(8)?; // FRAME: only a read-ahead hint
            }
            b'.' => return self.pop().map(Some),
            // ----- scalars -----
            b'N' => self.leaf(Value::None),
            0x88 => self.leaf(Value::Bool(true)),
            0x89 => self.leaf(Value::Bool(false)),
            b'J' => {
                let v = i32::from_le_bytes(self.array()?);
                self.leaf(Value::Int(v as i64));
            }
            b'K' => {
                let v = self.byte()?;
                self.leaf(Value::Int(v as i64));
            }
            b'M' => {
                let v = u16::from_le_bytes(self.array()?);
                self.leaf(Value::Int(v as i64));
            }
            0x8a => {
                let n = self.byte()? as usize;
                let bytes = self.take(n)?;
                self.leaf(long_value(bytes));
            }
            0x8b => {
                let n = self.len32()?;
                let bytes = self.take(n)?;
                self.leaf(long_value(bytes));
            }
            b'I' => {
                let line = self.line()?;
                let v = match line.as_str() {
                    "01" => Value::Bool(true),
                    "00" => Value::Bool(false),
                    s => Value::Int(s.parse().map_err(|_| format!("bad INT `{s}`"))?),
                };
                self.leaf(v);
            }
            b'L' => {
                let line = self.line()?;
                let digits = line.trim_end_matches('L');
                let v = digits
                    .parse()
                    .map_err(|_| format!("unsupported LONG `{line}`"))?;
                self.leaf(Value::Int(v));
            }
            b'G' => {
                let v = f64::from_be_bytes(self.array()?);
                self.leaf(Value::Float(v));
            }
            b'F' => {
                let line = self.line()?;
                let v = line.parse().map_err(|_| format!("bad FLOAT `{line}`"))?;
                self.leaf(Value::Float(v));
            }
            // ----- strings and bytes -----
            0x8c => {
                let n = self.byte()? as usize;
                self.unicode(n)?;
            }
            b'X' => {
                let n = self.len32()?;
                self.unicode(n)?;
            }
            0x8d => {
                let n = self.len64()?;
                self.unicode(n)?;
            }
            b'U' => {
                let n = self.byte()? as usize;
                self.py2_string(n)?;
            }
            b'T' => {
                let n = self.len32()?;
                self.py2_string(n)?;
            }
            b'C' => {
                let n = self.byte()? as usize;
                self.bytes(n)?;
            }
            b'B' => {
                let n = self.len32()?;
                self.bytes(n)?;
            }
            0x8e | 0x96 => {
                let n = self.len64()?;
                self.bytes(n)?;
            }
            b'V' => {
                let line = self.line()?;
                self.leaf(Value::Str(line));
            }
            // ----- containers -----
            b'(' => self.marks.push(self.stack.len()),
            b')' => self.push(Node::Tuple(Vec::new())),
            b']' => self.push(Node::List(Vec::new())),
            b'}' => self.push(Node::Dict(Vec::new())),
            0x8f => self.push(Node::Set(Vec::new())),
            0x85 => self.tuple_of(1)?,
            0x86 => self.tuple_of(2)?,
            0x87 => self.tuple_of(3)?,
            b't' => {
                let items = self.pop_mark()?;
                self.push(Node::Tuple(items));
            }
            b'l' => {
                let items = self.pop_mark()?;
                self.push(Node::List(items));
            }
            b'd' => {
                let items = self.pop_mark()?;
                let pairs = pairs(items)?;
                self.push(Node::Dict(pairs));
            }
            0x91 => {
                let items = self.pop_mark()?;
                self.push(Node::Set(items));
            }
            b'a' => {
                let item = self.pop()?;
                self.extend_list(vec![item])?;
            }
            b'e' => {
                let items = self.pop_mark()?;
                self.extend_list(items)?;
            }
            b's' => {
                let value = self.pop()?;
                let key = self.pop()?;
                self.extend_dict(vec![(key, value)])?;
            }
            b'u' => {
                let items = self.pop_mark()?;
                self.extend_dict(pairs(items)?)?;
            }
            0x90 => {
                let items = self.pop_mark()?;
                let set = self.top()?;
                match &mut self.arena[set] {
                    Node::Set(v) => v.extend(items),
                    _ => return Err("ADDITEMS on a non-set".into()),
                }
            }
            // ----- stack and memo -----
            b'0' => {
                self.pop()?;
            }
            b'1' => {
                self.pop_mark()?;
            }
            b'2' => {
                let top = self.top()?;
                self.stack.push(top);
            }
            b'q' => {
                let k = self.byte()? as u32;
                self.memo_put(k)?;
            }
            b'r' => {
                let k = u32::from_le_bytes(self.array()?);
                self.memo_put(k)?;
            }
            b'p' => {
                let line = self.line()?;
                let k = line.parse().map_err(|_| format!("bad PUT `{line}`"))?;
                self.memo_put(k)?;
            }
            0x94 => {
                let k = u32::try_from(self.memo.len()).map_err(|_| "memo too large")?;
                self.memo_put(k)?;
            }
            b'h' => {
                let k = self.byte()? as u32;
                self.memo_get(k)?;
            }
            b'j' => {
                let k = u32::from_le_bytes(self.array()?);
                self.memo_get(k)?;
            }
            b'g' => {
                let line = self.line()?;
                let k = line.parse().map_err(|_| format!("bad GET `{line}`"))?;
                self.memo_get(k)?;
            }
            // ----- globals, calls, persistent ids -----
            b'c' => {
                let module = self.line()?;
                let name = self.line()?;
                self.global(&module, &name)?;
            }
            0x93 => {
                let name = self.pop_str()?;
                let module = self.pop_str()?;
                self.global(&module, &name)?;
            }
            b'R' => {
                let args = self.pop()?;
                let callable = self.pop()?;
                let args = self.tuple_items(args)?;
                let id = self.call(callable, args, false)?;
                self.stack.push(id);
            }
            0x81 => {
                let args = self.pop()?;
                let class = self.pop()?;
                let args = self.tuple_items(args)?;
                let id = self.call(class, args, true)?;
                self.stack.push(id);
            }
            0x92 => {
                let kwargs = self.pop()?;
                let args = self.pop()?;
                let class = self.pop()?;
                let args = self.tuple_items(args)?;
                let id = self.call(class, args, true)?;
                self.build(id, kwargs)?;
                self.stack.push(id);
            }
            b'b' => {
                let state = self.pop()?;
                let target = self.top()?;
                self.build(target, state)?;
            }
            b'Q' => {
                let pid = self.pop()?;
                let id = self.persistent_load(pid)?;
                self.stack.push(id);
            }
            b'P' => return Err("text persistent ids (PERSID) are not used by torch".into()),
            other => return Err(format!("unsupported pickle opcode 0x{other:02x}")),
        }
        Ok(None)
    }

    fn global(&mut self, module: &str, name: &str) -> Step<()> {
        match classify(module, name) {
            Some((name, kind)) => {
                self.push(Node::Global { name, kind });
                Ok(())
            }
            None => Err(format!(
                "global `{module}.{name}` is not on the allow-list of loadable types"
            )),
        }
    }

    // ----- reading bytes -----

    fn take(&mut self, n: usize) -> Step<&'a [u8]> {
        let data: &'a [u8] = self.data;
        let end = self.pos.checked_add(n).filter(|&e| e <= data.len());
        match end {
            Some(end) => {
                let out = &data[self.pos..end];
                self.pos = end;
                Ok(out)
            }
            None => Err(format!(
                "truncated: {n} bytes wanted, {} left",
                data.len().saturating_sub(self.pos)
            )),
        }
    }

    fn byte(&mut self) -> Step<u8> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Step<[u8; N]> {
        let bytes = self.take(N)?;
        bytes.try_into().map_err(|_| "short read".to_string())
    }

    fn len32(&mut self) -> Step<usize> {
        let n = i32::from_le_bytes(self.array()?);
        usize::try_from(n).map_err(|_| format!("negative length {n}"))
    }

    fn len64(&mut self) -> Step<usize> {
        let n = u64::from_le_bytes(self.array()?);
        usize::try_from(n).map_err(|_| format!("length {n} too large"))
    }

    /// A newline-terminated text argument (protocol 0 opcodes).
    fn line(&mut self) -> Step<String> {
        let rest = &self.data[self.pos.min(self.data.len())..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("truncated: unterminated text argument")?;
        let line = self.take(n + 1)?;
        String::from_utf8(line[..n].to_vec()).map_err(|_| "text argument is not UTF-8".into())
    }

    fn unicode(&mut self, n: usize) -> Step<()> {
        let bytes = self.take(n)?;
        let s = std::str::from_utf8(bytes).map_err(|_| "string is not valid UTF-8")?;
        self.leaf(Value::Str(s.to_string()));
        Ok(())
    }

    /// A Python 2 `str`: text when it is UTF-8 (keys, names), else raw bytes.
    fn py2_string(&mut self, n: usize) -> Step<()> {
        let bytes = self.take(n)?;
        let v = match std::str::from_utf8(bytes) {
            Ok(s) => Value::Str(s.to_string()),
            Err(_) => Value::Bytes(bytes.to_vec()),
        };
        self.leaf(v);
        Ok(())
    }

    fn bytes(&mut self, n: usize) -> Step<()> {
        let bytes = self.take(n)?;
        self.leaf(Value::Bytes(bytes.to_vec()));
        Ok(())
    }

    // ----- the stack -----

    fn pop(&mut self) -> Step<Id> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err("stack underflow past a MARK".into());
        }
        self.stack.pop().ok_or_else(|| "stack underflow".into())
    }

    fn top(&self) -> Step<Id> {
        self.stack
            .last()
            .copied()
            .ok_or_else(|| "stack underflow".into())
    }

    fn pop_mark(&mut self) -> Step<Vec<Id>> {
        let mark = self.marks.pop().ok_or("no MARK on the stack")?;
        if mark > self.stack.len() {
            return Err("MARK above the stack top".into());
        }
        Ok(self.stack.split_off(mark))
    }

    fn tuple_of(&mut self, n: usize) -> Step<()> {
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.pop()?);
        }
        items.reverse();
        self.push(Node::Tuple(items));
        Ok(())
    }

    fn pop_str(&mut self) -> Step<String> {
        let id = self.pop()?;
        match &self.arena[id] {
            Node::Leaf(Value::Str(s)) => Ok(s.clone()),
            _ => Err("STACK_GLOBAL wants two strings".into()),
        }
    }

    fn extend_list(&mut self, items: Vec<Id>) -> Step<()> {
        let list = self.top()?;
        match &mut self.arena[list] {
            Node::List(v) => {
                v.extend(items);
                Ok(())
            }
            _ => Err("APPEND on a non-list".into()),
        }
    }

    /// Adds entries in order. Keys are not de-duplicated: a pickle of a Python dict never repeats
    /// one, and a hand-made pickle that does only gets a dict with both entries.
    fn extend_dict(&mut self, items: Vec<(Id, Id)>) -> Step<()> {
        let dict = self.top()?;
        match &mut self.arena[dict] {
            Node::Dict(entries) => {
                entries.extend(items);
                Ok(())
            }
            _ => Err("SETITEM on a non-dict".into()),
        }
    }

    fn memo_put(&mut self, k: u32) -> Step<()> {
        let top = self.top()?;
        self.memo.insert(k, top);
        Ok(())
    }

    fn memo_get(&mut self, k: u32) -> Step<()> {
        let id = *self
            .memo
            .get(&k)
            .ok_or_else(|| format!("memo key {k} is unset"))?;
        self.stack.push(id);
        Ok(())
    }

    /// The items of a tuple node (call arguments).
    pub(super) fn tuple_items(&self, id: Id) -> Step<Vec<Id>> {
        match &self.arena[id] {
            Node::Tuple(items) => Ok(items.clone()),
            _ => Err("call arguments are not a tuple".into()),
        }
    }
}

/// Errors inside one opcode are plain messages; `run` adds the file and the byte position.
pub(super) type Step<T> = std::result::Result<T, String>;

/// Key/value pairs from a flat list (SETITEMS, DICT).
fn pairs(items: Vec<Id>) -> Step<Vec<(Id, Id)>> {
    if !items.len().is_multiple_of(2) {
        return Err("odd number of items for a dict".into());
    }
    Ok(items.chunks_exact(2).map(|c| (c[0], c[1])).collect())
}

/// A little-endian two's-complement integer of any width (LONG1/LONG4).
fn long_value(bytes: &[u8]) -> Value {
    if bytes.len() > 8 {
        return Value::BigInt(bytes.to_vec());
    }
    let negative = bytes.last().is_some_and(|&b| b & 0x80 != 0);
    let mut buf = [if negative { 0xff } else { 0 }; 8];
    buf[..bytes.len()].copy_from_slice(bytes);
    Value::Int(i64::from_le_bytes(buf))
}
