//! Reading the fields of a Hugging Face `config.json` with transformers' defaults: a missing
//! or null field takes the default, a present one must have the right kind and a sane size, so
//! a corrupt config is refused by name before anything is allocated.

use crate::nn::Activation;
use crate::{Error, Result};
use serde_json::Value;

/// Sizes beyond any published model.
pub const MAX_SIZE: usize = 1 << 20;

/// One config object (the file's root, or a nested `text_config` / `vision_config`).
#[derive(Clone, Copy)]
pub struct Fields<'a> {
    v: &'a Value,
    /// Names the config in errors ("CLIP text_config").
    what: &'static str,
    /// The file it was read from, for errors (`config.json`, `scheduler_config.json`).
    file: &'static str,
}

impl<'a> Fields<'a> {
    pub fn new(v: &'a Value, what: &'static str) -> Fields<'a> {
        Fields::in_file(v, what, "config.json")
    }

    /// A config read from another file than `config.json`.
    pub fn in_file(v: &'a Value, what: &'static str, file: &'static str) -> Fields<'a> {
        Fields { v, what, file }
    }

    /// The nested object `key` (e.g. `vision_config`); a missing one reads as empty, so every
    /// field takes its default.
    pub fn nested(&self, key: &str, what: &'static str) -> Result<Fields<'a>> {
        static EMPTY: Value = Value::Null;
        match self.v.get(key) {
            None | Some(Value::Null) => Ok(Fields {
                v: &EMPTY,
                what,
                file: self.file,
            }),
            Some(o @ Value::Object(_)) => Ok(Fields {
                v: o,
                what,
                file: self.file,
            }),
            Some(x) => Err(self.bad(format!("`{key}` must be an object, got {x}"))),
        }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.v.get(key).filter(|x| !x.is_null())
    }

    pub fn error(&self, msg: String) -> Error {
        Error::format(self.what, format!("{}: {msg}", self.file))
    }

    fn bad(&self, msg: String) -> Error {
        self.error(msg)
    }

    /// A positive size, at most [`MAX_SIZE`].
    pub fn size(&self, key: &str, default: usize) -> Result<usize> {
        match self.get(key) {
            None => Ok(default),
            Some(x) => x
                .as_u64()
                .filter(|&n| n > 0 && n as usize <= MAX_SIZE)
                .map(|n| n as usize)
                .ok_or_else(|| {
                    self.bad(format!("`{key}` must be a size in 1..={MAX_SIZE}, got {x}"))
                }),
        }
    }

    pub fn float(&self, key: &str, default: f64) -> Result<f64> {
        match self.get(key) {
            None => Ok(default),
            Some(x) => x
                .as_f64()
                .filter(|f| f.is_finite())
                .ok_or_else(|| self.bad(format!("`{key}` must be a number, got {x}"))),
        }
    }

    /// A number that may be absent (or null).
    pub fn opt_float(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.float(key, 0.0).map(Some),
        }
    }

    /// A list of numbers that may be absent (or null).
    pub fn floats(&self, key: &str) -> Result<Option<Vec<f64>>> {
        let Some(x) = self.get(key) else {
            return Ok(None);
        };
        let bad = || self.bad(format!("`{key}` must be a list of numbers, got {x}"));
        let list = x
            .as_array()
            .filter(|a| a.len() <= MAX_SIZE)
            .ok_or_else(bad)?;
        list.iter()
            .map(|v| v.as_f64().filter(|f| f.is_finite()).ok_or_else(bad))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// A non-negative integer (0 allowed), at most [`MAX_SIZE`].
    pub fn count(&self, key: &str, default: usize) -> Result<usize> {
        match self.get(key) {
            None => Ok(default),
            Some(x) => x
                .as_u64()
                .filter(|&n| n as usize <= MAX_SIZE)
                .map(|n| n as usize)
                .ok_or_else(|| {
                    self.bad(format!(
                        "`{key}` must be an integer in 0..={MAX_SIZE}, got {x}"
                    ))
                }),
        }
    }

    /// One of `choices` by name; a name outside them is refused with the list.
    pub fn choice(
        &self,
        key: &str,
        default: &'static str,
        choices: &[&'static str],
    ) -> Result<&'static str> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::String(name)) => choices
                .iter()
                .find(|c| **c == name.as_str())
                .copied()
                .ok_or_else(|| {
                    self.bad(format!(
                        "{key} `{name}` is not supported; supported: {}",
                        choices.join(", ")
                    ))
                }),
            Some(x) => Err(self.bad(format!("`{key}` must be a name, got {x}"))),
        }
    }

    pub fn flag(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(x) => x
                .as_bool()
                .ok_or_else(|| self.bad(format!("`{key}` must be true or false, got {x}"))),
        }
    }

    /// A token id (0 allowed).
    pub fn id(&self, key: &str, default: u32) -> Result<u32> {
        match self.get(key) {
            None => Ok(default),
            Some(x) => x
                .as_u64()
                .filter(|&n| n <= u32::MAX as u64)
                .map(|n| n as u32)
                .ok_or_else(|| self.bad(format!("`{key}` must be a token id, got {x}"))),
        }
    }

    pub fn string(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Value::as_str)
    }

    /// An activation by transformers' name (`hidden_act`).
    pub fn activation(&self, key: &str, default: Activation) -> Result<Activation> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::String(name)) => Activation::parse(name)
                .ok_or_else(|| self.bad(format!("{key} `{name}` is not supported"))),
            Some(x) => Err(self.bad(format!("{key} must be a name, got {x}"))),
        }
    }

    /// `id2label` ({"0": "cat", ...}) as a list by index; `num_labels` alone gives LABEL_i
    /// names; neither gives none.
    pub fn labels(&self) -> Result<Vec<String>> {
        if let Some(map) = self.get("id2label").and_then(Value::as_object) {
            let mut out = vec![String::new(); map.len()];
            for (k, name) in map {
                let i: usize = k.parse().ok().filter(|&i| i < map.len()).ok_or_else(|| {
                    self.bad(format!(
                        "id2label key `{k}` is not an index below {}",
                        map.len()
                    ))
                })?;
                out[i] = name.as_str().unwrap_or_default().to_string();
            }
            return Ok(out);
        }
        let n = self.get("num_labels").and_then(Value::as_u64).unwrap_or(0) as usize;
        Ok((0..n.min(MAX_SIZE)).map(|i| format!("LABEL_{i}")).collect())
    }
}
