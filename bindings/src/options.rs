//! Options passed as Rhai object maps (`#{ lr: 3e-4, weight_decay: 0.1 }`). An unknown key is an
//! error that lists the valid keys, so a typo never silently falls back to a default.

use crate::convert::number;
use crate::error::{runtime_error, RhaiResult};
use rhai::{Dynamic, Map, INT};

pub struct Options<'a> {
    what: &'a str,
    map: Map,
}

impl<'a> Options<'a> {
    pub fn new(what: &'a str, map: Map, valid: &[&str]) -> RhaiResult<Self> {
        let unknown: Vec<&str> = map
            .keys()
            .map(|k| k.as_str())
            .filter(|k| !valid.contains(k))
            .collect();
        if !unknown.is_empty() {
            let hint = match crate::suggest::did_you_mean(unknown[0], valid.iter().copied()) {
                Some(near) => format!(" (did you mean `{near}`?)"),
                None => String::new(),
            };
            return Err(runtime_error(format!(
                "{what}: unknown option{} {}{hint}; valid options: {}",
                if unknown.len() > 1 { "s" } else { "" },
                unknown.join(", "),
                valid.join(", ")
            )));
        }
        Ok(Options { what, map })
    }

    pub fn empty(what: &'a str) -> Self {
        Options {
            what,
            map: Map::new(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&Dynamic> {
        self.map.get(key).filter(|v| !v.is_unit())
    }

    pub fn float(&self, key: &str, default: f64) -> RhaiResult<f64> {
        self.get(key)
            .map(|v| number(v, &format!("{} option {key}", self.what)))
            .unwrap_or(Ok(default))
    }

    pub fn opt_float(&self, key: &str) -> RhaiResult<Option<f64>> {
        self.get(key)
            .map(|v| number(v, &format!("{} option {key}", self.what)))
            .transpose()
    }

    pub fn int(&self, key: &str, default: INT) -> RhaiResult<INT> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_int().map_err(|t| {
                runtime_error(format!(
                    "{} option {key}: expected an integer, got {t}",
                    self.what
                ))
            }),
        }
    }

    pub fn usize(&self, key: &str, default: usize) -> RhaiResult<usize> {
        let v = self.int(key, default as INT)?;
        usize::try_from(v).map_err(|_| {
            runtime_error(format!(
                "{} option {key}: expected a non-negative integer, got {v}",
                self.what
            ))
        })
    }

    pub fn bool(&self, key: &str, default: bool) -> RhaiResult<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_bool().map_err(|t| {
                runtime_error(format!(
                    "{} option {key}: expected true or false, got {t}",
                    self.what
                ))
            }),
        }
    }

    pub fn string(&self, key: &str) -> RhaiResult<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.clone().into_string().map(Some).map_err(|t| {
                runtime_error(format!(
                    "{} option {key}: expected a string, got {t}",
                    self.what
                ))
            }),
        }
    }

    /// An integer or a pair `[a, b]`, as kernel sizes and strides are given.
    pub fn pair(&self, key: &str, default: (usize, usize)) -> RhaiResult<(usize, usize)> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => pair(v, &format!("{} option {key}", self.what)),
        }
    }
}

pub fn pair(v: &Dynamic, what: &str) -> RhaiResult<(usize, usize)> {
    let bad = || runtime_error(format!("{what}: expected a non-negative integer or [a, b]"));
    if let Ok(i) = v.as_int() {
        let u = usize::try_from(i).map_err(|_| bad())?;
        return Ok((u, u));
    }
    let arr = v.read_lock::<rhai::Array>().ok_or_else(bad)?;
    match arr.as_slice() {
        [a, b] => {
            let a = usize::try_from(a.as_int().map_err(|_| bad())?).map_err(|_| bad())?;
            let b = usize::try_from(b.as_int().map_err(|_| bad())?).map_err(|_| bad())?;
            Ok((a, b))
        }
        _ => Err(bad()),
    }
}

/// A pair of floats given as `[a, b]` (Adam's betas).
pub fn pair_f64(o: &Options, key: &str, default: (f64, f64)) -> RhaiResult<(f64, f64)> {
    let Some(v) = o.get(key) else {
        return Ok(default);
    };
    let bad = || {
        runtime_error(format!(
            "{} option {key}: expected [a, b] with two numbers",
            o.what
        ))
    };
    let arr = v.read_lock::<rhai::Array>().ok_or_else(bad)?;
    match arr.as_slice() {
        [a, b] => Ok((number(a, key)?, number(b, key)?)),
        _ => Err(bad()),
    }
}
