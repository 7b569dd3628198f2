//! The text files a script names: strings or arrays of paths, directories walked by extension.
//! `text::train_bpe`, `text::files` and `data::token_file` read their inputs this way.

use crate::error::{guard, runtime_error, RhaiResult};
use crate::options::Options;
use rhai::{Array, Dynamic};
use rusting_brain::text::collect_files;
use std::path::PathBuf;

/// Extensions a directory contributes when a script names none.
const DEFAULT_EXTENSIONS: &[&str] = &["txt", "md", "jsonl"];

pub(crate) fn strings(v: &Dynamic, what: &str) -> RhaiResult<Vec<String>> {
    let bad = || runtime_error(format!("{what}: expected an array of strings"));
    if let Ok(s) = v.clone().into_string() {
        return Ok(vec![s]);
    }
    let arr = v.read_lock::<Array>().ok_or_else(bad)?;
    arr.iter()
        .map(|x| x.clone().into_string().map_err(|_| bad()))
        .collect()
}

pub(crate) fn extensions(o: &Options) -> RhaiResult<Vec<String>> {
    match o.get("extensions") {
        Some(v) => strings(v, "extensions"),
        None => Ok(DEFAULT_EXTENSIONS.iter().map(|s| s.to_string()).collect()),
    }
}

/// Files named in `paths` (strings or an array of them), directories walked.
pub(crate) fn files_of(paths: &Dynamic, exts: &[String], what: &str) -> RhaiResult<Vec<PathBuf>> {
    let paths: Vec<PathBuf> = strings(paths, what)?
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let files = guard(|| collect_files(&paths, exts))?;
    if files.is_empty() {
        return Err(runtime_error(format!(
            "{what}: no files with extension {} under {}",
            exts.join("/"),
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(files)
}
