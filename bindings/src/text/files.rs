//! The text files a script names: strings or arrays of paths and globs, directories walked by
//! extension or, with `extensions: "*"`, by content (every file that is text).
//! `text::train_bpe`, `text::files` and `data::token_file` read their inputs this way.

use crate::convert::string_list;
use crate::error::{guard, runtime_error, RhaiResult};
use rhai::{Array, Dynamic};
use rusting_brain::text::{collect, FileFilter};
use std::path::PathBuf;

/// Extensions a directory contributes when a script names none.
const DEFAULT_EXTENSIONS: &[&str] = &["txt", "md", "jsonl"];

/// One string, or an array of them.
pub(crate) fn strings(v: &Dynamic, what: &str) -> RhaiResult<Vec<String>> {
    if let Ok(s) = v.clone().into_string() {
        return Ok(vec![s]);
    }
    let arr = v.read_lock::<Array>().ok_or_else(|| {
        runtime_error(format!(
            "{what}: expected a string or an array of strings, got {}",
            v.type_name()
        ))
    })?;
    string_list(&arr, what)
}

/// The `extensions` option: a list of extensions, or `"*"` for every file whose content is
/// text (binary files skipped).
pub(crate) fn extensions(list: Option<Vec<String>>) -> FileFilter {
    match list {
        Some(list) if list.len() == 1 && list[0] == "*" => FileFilter::Text,
        Some(list) => FileFilter::Extensions(list),
        None => FileFilter::Extensions(DEFAULT_EXTENSIONS.iter().map(|s| s.to_string()).collect()),
    }
}

/// Files named in `paths` (strings or an array of them), directories walked.
pub(crate) fn files_of(
    paths: &Dynamic,
    filter: &FileFilter,
    what: &str,
) -> RhaiResult<Vec<PathBuf>> {
    let paths: Vec<PathBuf> = strings(paths, what)?
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let files = guard(|| collect(&paths, filter))?;
    if files.is_empty() {
        let kind = match filter {
            FileFilter::Extensions(exts) => format!("files with extension {}", exts.join("/")),
            FileFilter::Text => "text files".to_string(),
        };
        return Err(runtime_error(format!(
            "{what}: no {kind} under {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(files)
}
