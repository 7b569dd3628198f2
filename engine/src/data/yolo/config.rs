//! ultralytics dataset YAML (`data.yaml`), with the rules of `check_det_dataset` (8.4.190).
//!
//! - `train` and `val` are required (an old `validation` key stands in for `val`); each is a
//!   path or a list of paths; `test` is optional. An empty value means "no images".
//! - `names` is a list, or a map from class index (int or int-like string) to name covering
//!   exactly 0..n; non-string names become strings. Without `names`, `nc` gives `class_{i}`.
//!   `nc`, when present, must be integer-like and agree with `names`.
//! - The dataset root is `path`, else the YAML's folder. A relative `path` that does not exist
//!   from the current directory is taken relative to ultralytics' settings folder
//!   (`DATASETS_DIR`); we have none, so we take it relative to the YAML's folder instead.
//! - Each split is joined to the root; a string split starting with `../` that does not exist
//!   is retried without the `../`.

use crate::{Error, Result};
use std::path::{Component, Path, PathBuf};
use yaml_rust2::Yaml;

/// A parsed and resolved dataset YAML.
#[derive(Clone, Debug, PartialEq)]
pub struct DataConfig {
    /// The YAML file it came from.
    pub file: PathBuf,
    /// The dataset root every split is relative to (absolute).
    pub root: PathBuf,
    pub train: Vec<PathBuf>,
    pub val: Vec<PathBuf>,
    pub test: Vec<PathBuf>,
    /// Class names by index.
    pub names: Vec<String>,
}

impl DataConfig {
    /// Reads and resolves a dataset YAML.
    pub fn load(file: impl AsRef<Path>) -> Result<DataConfig> {
        let file = file.as_ref();
        let text = std::fs::read_to_string(file).map_err(|e| Error::io(file, e))?;
        Self::parse(&text, file)
    }

    /// Parses YAML text as if read from `file` (which anchors relative paths).
    pub fn parse(text: &str, file: &Path) -> Result<DataConfig> {
        let err = |msg: String| Error::format("data yaml", format!("{}: {msg}", file.display()));
        let docs = crate::io::yaml::parse_untrusted(text)
            .map_err(|e| err(format!("not valid YAML: {e}")))?;
        let doc = docs.into_iter().next().unwrap_or(Yaml::Null);
        let map = doc
            .as_hash()
            .ok_or_else(|| err("expected a mapping at the top level".into()))?;
        let get = |key: &str| map.get(&Yaml::String(key.into())).filter(|v| !v.is_null());
        let has = |key: &str| map.contains_key(&Yaml::String(key.into()));

        for key in ["train", "val"] {
            if !(has(key) || (key == "val" && has("validation"))) {
                return Err(err(format!(
                    "the '{key}' key is missing ('train' and 'val' are required)"
                )));
            }
        }
        let names = parse_names(get("names"), get("nc"), has("nc")).map_err(err)?;

        let yaml_dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let root = match get("path") {
            None => yaml_dir.clone(),
            Some(Yaml::String(p)) => PathBuf::from(p),
            Some(_) => return Err(err("'path' must be a string".into())),
        };
        let root = if root.is_relative() && !root.exists() {
            yaml_dir.join(root)
        } else {
            root
        };
        let root = resolve(&root);

        let split = |key: &str| -> Result<Vec<PathBuf>> {
            match get(key) {
                None => Ok(Vec::new()),
                Some(Yaml::String(s)) => {
                    let joined = resolve(&root.join(s));
                    match s.strip_prefix("../") {
                        Some(rest) if !joined.exists() => Ok(vec![resolve(&root.join(rest))]),
                        _ => Ok(vec![joined]),
                    }
                }
                Some(Yaml::Array(items)) => items
                    .iter()
                    .map(|item| match item {
                        Yaml::String(s) => Ok(resolve(&root.join(s))),
                        _ => Err(err(format!("'{key}' entries must be strings"))),
                    })
                    .collect(),
                Some(_) => Err(err(format!("'{key}' must be a string or a list"))),
            }
        };
        let val = if has("val") {
            split("val")?
        } else {
            split("validation")?
        };
        Ok(DataConfig {
            file: file.to_path_buf(),
            train: split("train")?,
            val,
            test: split("test")?,
            root,
            names,
        })
    }

    /// The image paths of a split (`train`, `val` or `test`), an error when it has none.
    pub fn split(&self, name: &str) -> Result<&[PathBuf]> {
        let paths = match name {
            "train" => &self.train,
            "val" => &self.val,
            "test" => &self.test,
            _ => {
                return Err(Error::invalid(
                    "data yaml",
                    format!("unknown split '{name}' (train, val or test)"),
                ))
            }
        };
        if paths.is_empty() {
            return Err(Error::format(
                "data yaml",
                format!("{}: the '{name}' split has no images", self.file.display()),
            ));
        }
        Ok(paths)
    }
}

/// `names` (list or map) and `nc`, as `check_det_dataset` and `check_class_names` validate them.
fn parse_names(
    names: Option<&Yaml>,
    nc: Option<&Yaml>,
    has_nc: bool,
) -> std::result::Result<Vec<String>, String> {
    let nc = match (nc, has_nc) {
        (None, false) => None,
        (Some(Yaml::Integer(n)), _) if *n >= 0 => Some(*n as usize),
        (Some(Yaml::Real(s) | Yaml::String(s)), _) => match s.trim().parse::<f64>() {
            Ok(v) if v >= 0.0 && v.fract() == 0.0 => Some(v as usize),
            _ => return Err(format!("'nc: {s}' must be an integer")),
        },
        (other, _) => return Err(format!("'nc: {}' must be an integer", scalar_text(other))),
    };
    let names: Vec<String> = match names {
        None => match nc {
            Some(n) => (0..n).map(|i| format!("class_{i}")).collect(),
            None => {
                return Err(
                    "the 'names' key is missing (either 'names' or 'nc' is required)".into(),
                )
            }
        },
        Some(Yaml::Array(items)) => items.iter().map(|v| scalar_text(Some(v))).collect(),
        Some(Yaml::Hash(map)) => {
            let mut out: Vec<Option<String>> = vec![None; map.len()];
            for (k, v) in map {
                let index = match k {
                    Yaml::Integer(i) => usize::try_from(*i).ok(),
                    Yaml::String(s) => s.trim().parse::<usize>().ok(),
                    _ => None,
                };
                match index.and_then(|i| out.get_mut(i)) {
                    Some(slot) => *slot = Some(scalar_text(Some(v))),
                    None => {
                        return Err(format!(
                            "{}-class dataset requires class indices 0-{}, got '{}' in 'names'",
                            map.len(),
                            map.len().saturating_sub(1),
                            scalar_text(Some(k))
                        ))
                    }
                }
            }
            out.into_iter()
                .collect::<Option<Vec<_>>>()
                .ok_or("'names' has a repeated class index")?
        }
        Some(_) => return Err("'names' must be a list or a mapping".into()),
    };
    if names.is_empty() {
        return Err("0-class dataset: at least one class name is required".into());
    }
    if let Some(n) = nc {
        if n != names.len() {
            return Err(format!(
                "'names' length {} and 'nc: {n}' must match",
                names.len()
            ));
        }
    }
    Ok(names)
}

/// A YAML scalar as Python's `str()` would print it (`True`, `1.5`, the text itself).
fn scalar_text(v: Option<&Yaml>) -> String {
    match v {
        Some(Yaml::String(s) | Yaml::Real(s)) => s.clone(),
        Some(Yaml::Integer(i)) => i.to_string(),
        Some(Yaml::Boolean(b)) => if *b { "True" } else { "False" }.into(),
        Some(Yaml::Null) | None => "None".into(),
        Some(other) => format!("{other:?}"),
    }
}

/// `Path.resolve()`: the canonical path when it exists, else absolute with `.` and `..`
/// removed lexically.
pub(crate) fn resolve(p: &Path) -> PathBuf {
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
