//! JSONL documents: one JSON object per line, the text in a named string field. Blank lines
//! are skipped; any other line that is not such an object is an error naming file and line.

use crate::{Error, Result};
use std::io::BufRead;
use std::path::Path;

/// Calls `each` with the text of every document in the JSONL file at `path`.
pub fn for_each_document(
    path: &Path,
    field: &str,
    mut each: impl FnMut(String) -> Result<()>,
) -> Result<()> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let at = || format!("{}:{}", path.display(), i + 1);
        let line = line.map_err(|e| Error::format("jsonl", format!("{}: {e}", at())))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| Error::format("jsonl", format!("{}: not valid JSON: {e}", at())))?;
        match value.get(field) {
            Some(serde_json::Value::String(s)) => each(s.clone())?,
            Some(other) => {
                return Err(Error::format(
                    "jsonl",
                    format!(
                        "{}: field {field:?} is not a string but {}",
                        at(),
                        kind(other)
                    ),
                ))
            }
            None => {
                return Err(Error::format(
                    "jsonl",
                    format!(
                        "{}: no field {field:?} (name the field that holds the text)",
                        at()
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// Whether a path is read as JSONL (`.jsonl`, `.ndjson`) rather than as one text document.
pub fn is_jsonl(path: &Path) -> bool {
    matches!(
        path.extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref(),
        Some("jsonl") | Some("ndjson")
    )
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
