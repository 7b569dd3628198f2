//! `.ipynb` notebooks (nbformat 4): converted from and to `// %%` scripts, and run in place
//! (`brain notebook run x.ipynb`) with the same outputs the kernel would send, as
//! `jupyter nbconvert --execute --inplace` would store them.

use crate::cell::{self, CellOutput, Frontend};
use crate::notebook::{markdown_text, split_cells};
use crate::session::Session;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The notebook metadata that names this kernel, so Jupyter opens the file with it.
fn notebook_metadata() -> Value {
    json!({
        "kernelspec": {"name": "brain", "display_name": "brain (Rhai)", "language": "rhai"},
        "language_info": {
            "name": "rhai",
            "file_extension": ".rhai",
            "mimetype": "text/x-rhai",
            "codemirror_mode": "rust",
            "pygments_lexer": "rust"
        }
    })
}

/// nbformat stores text as a list of lines, each with its line end.
fn source_lines(text: &str) -> Value {
    let text = text.trim_end_matches('\n');
    Value::Array(
        text.split_inclusive('\n')
            .map(|l| Value::from(l.to_string()))
            .collect(),
    )
}

/// A cell's `source`, a string or a list of strings.
fn source_text(cell: &Value) -> String {
    match &cell["source"] {
        Value::String(s) => s.clone(),
        Value::Array(lines) => lines.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

/// A `// %%` script as a notebook: code cells, and `// %% [markdown]` cells as Markdown.
pub fn from_script(src: &str) -> Value {
    let cells: Vec<Value> = split_cells(src)
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let id = format!("cell-{}", i + 1);
            if c.markdown {
                json!({"cell_type": "markdown", "id": id, "metadata": {},
                       "source": source_lines(&markdown_text(&c.source))})
            } else {
                json!({"cell_type": "code", "id": id, "metadata": {}, "execution_count": null,
                       "outputs": [], "source": source_lines(c.source.trim_matches('\n'))})
            }
        })
        .collect();
    json!({"cells": cells, "metadata": notebook_metadata(), "nbformat": 4, "nbformat_minor": 5})
}

/// A notebook as a `// %%` script (outputs dropped).
pub fn to_script(nb: &Value) -> String {
    let mut out = String::new();
    for c in cells(nb).unwrap_or(&Vec::new()) {
        let text = source_text(c);
        match c["cell_type"].as_str() {
            Some("code") => {
                out.push_str("// %%\n");
                out.push_str(text.trim_end_matches('\n'));
                out.push('\n');
            }
            Some("markdown") => {
                out.push_str("// %% [markdown]\n");
                for line in text.trim_end_matches('\n').lines() {
                    out.push_str(if line.is_empty() { "//" } else { "// " });
                    out.push_str(line);
                    out.push('\n');
                }
            }
            _ => {}
        }
    }
    out
}

fn cells(nb: &Value) -> Result<&Vec<Value>, String> {
    nb["cells"]
        .as_array()
        .ok_or_else(|| "not a notebook: no `cells` list".to_string())
}

/// Reads a notebook file, checking that it is nbformat 4.
pub fn read(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let nb: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a notebook (not JSON: {e})", path.display()))?;
    match nb["nbformat"].as_u64() {
        Some(4) => {}
        Some(v) => {
            return Err(format!(
                "{}: nbformat {v}; brain reads nbformat 4 (jupyter nbconvert --to notebook upgrades older files)",
                path.display()
            ))
        }
        None => return Err(format!("{}: not a notebook (no nbformat)", path.display())),
    }
    cells(&nb).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(nb)
}

pub fn write(path: &Path, nb: &Value) -> Result<(), String> {
    // One-space indentation, as Jupyter writes notebooks, so diffs stay small.
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(nb, &mut ser).map_err(|e| e.to_string())?;
    out.push(b'\n');
    std::fs::write(path, out).map_err(|e| format!("{}: cannot write: {e}", path.display()))
}

/// Collects a cell's outputs as nbformat stores them; a progress bar's updates replace its
/// output, consecutive stream text of one name joins.
#[derive(Default)]
struct Collector {
    outputs: Mutex<Vec<(Option<String>, CellOutput)>>,
}

impl Frontend for Collector {
    fn emit(&self, output: CellOutput) {
        let mut outputs = self.outputs.lock().unwrap_or_else(|e| e.into_inner());
        match output {
            CellOutput::Stream { name, text } => {
                if let Some((
                    _,
                    CellOutput::Stream {
                        name: last,
                        text: t,
                    },
                )) = outputs.last_mut()
                {
                    if *last == name {
                        t.push_str(&text);
                        return;
                    }
                }
                outputs.push((None, CellOutput::Stream { name, text }));
            }
            CellOutput::Display {
                data,
                display_id: Some(id),
                update: true,
            } => {
                if let Some((_, CellOutput::Display { data: shown, .. })) = outputs
                    .iter_mut()
                    .find(|(shown_id, _)| shown_id.as_deref() == Some(id.as_str()))
                {
                    *shown = data;
                }
            }
            CellOutput::Display {
                data, display_id, ..
            } => outputs.push((
                display_id.clone(),
                CellOutput::Display {
                    data,
                    display_id,
                    update: false,
                },
            )),
            other => outputs.push((None, other)),
        }
    }

    fn read_line(&self, _prompt: &str) -> Result<Option<String>, String> {
        Err("a notebook run by `brain notebook run` takes no input".into())
    }
}

/// Runs the code cells of `nb` in `session`, storing each one's outputs and execution count.
/// Stops after a failing cell unless `keep_going`. Returns whether every cell ran without error.
pub fn run(
    session: &mut Session,
    nb: &mut Value,
    name: &str,
    keep_going: bool,
) -> Result<bool, String> {
    let cells = nb["cells"]
        .as_array_mut()
        .ok_or("not a notebook: no `cells` list")?;
    let mut count = 0;
    let mut all_ok = true;
    for c in cells.iter_mut().filter(|c| c["cell_type"] == "code") {
        count += 1;
        let code = source_text(c);
        let collector = Arc::new(Collector::default());
        let origin = format!("{name}:In[{count}]");
        let outcome = cell::run(session, collector.clone(), &code, &origin, true);
        let outputs: Vec<Value> = collector
            .outputs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, o)| cell::nbformat_output(o, Some(count)))
            .collect();
        c["outputs"] = Value::Array(outputs);
        c["execution_count"] = json!(count);
        if outcome.is_err() {
            all_ok = false;
            if !keep_going {
                break;
            }
        }
    }
    Ok(all_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str =
        "// %% [markdown]\n// # Title\n//\n// Some text.\n// %%\nlet a = 1;\nprint(a);\n// %%\na + 1\n";

    #[test]
    fn a_script_becomes_a_notebook_and_back() {
        let nb = from_script(SCRIPT);
        let cells = nb["cells"].as_array().unwrap();
        assert_eq!(cells.len(), 3);
        assert_eq!(cells[0]["cell_type"], "markdown");
        assert_eq!(cells[0]["source"], json!(["# Title\n", "\n", "Some text."]));
        assert_eq!(cells[1]["source"], json!(["let a = 1;\n", "print(a);"]));
        assert_eq!(nb["metadata"]["kernelspec"]["name"], "brain");
        assert_eq!(to_script(&nb), SCRIPT);
    }

    #[test]
    fn running_stores_streams_results_and_errors_and_stops_at_the_first_error() {
        let mut nb = from_script(
            "let a = 2;\nprint(a);\na * 3\n// %%\nlet b = nope;\n// %%\nprint(\"never\");\n",
        );
        let mut session = Session::new(rusting_brain_rhai::new_engine());
        // print() goes to stdout, which only the kernel's capture turns into a stream here;
        // the session's values and errors are what this checks.
        let ok = run(&mut session, &mut nb, "t.ipynb", false).unwrap();
        assert!(!ok);
        let cells = nb["cells"].as_array().unwrap();
        let first = cells[0]["outputs"].as_array().unwrap();
        let result = first
            .iter()
            .find(|o| o["output_type"] == "execute_result")
            .unwrap();
        assert_eq!(result["data"]["text/plain"], "6");
        assert_eq!(result["execution_count"], 1);
        let err = &cells[1]["outputs"][0];
        assert_eq!(err["output_type"], "error");
        assert_eq!(err["ename"], "RuntimeError");
        assert!(
            err["traceback"][0]
                .as_str()
                .unwrap()
                .starts_with("t.ipynb:In[2]:1:"),
            "{err}"
        );
        assert_eq!(
            cells[2]["execution_count"],
            Value::Null,
            "not run after the error"
        );
    }

    #[test]
    fn progress_updates_replace_their_output_and_streams_join() {
        let c = Collector::default();
        let stream = |t: &str| CellOutput::Stream {
            name: "stdout",
            text: t.into(),
        };
        let bar = |text: &str, update| CellOutput::Display {
            data: [("text/plain".to_string(), Value::from(text))]
                .into_iter()
                .collect(),
            display_id: Some("p1".into()),
            update,
        };
        c.emit(stream("a\n"));
        c.emit(stream("b\n"));
        c.emit(bar("1/2", false));
        c.emit(bar("2/2", true));
        let outputs = c.outputs.lock().unwrap();
        assert_eq!(outputs.len(), 2);
        assert_eq!(outputs[0].1, stream("a\nb\n"));
        assert!(
            matches!(&outputs[1].1, CellOutput::Display { data, .. } if data["text/plain"] == "2/2")
        );
    }

    #[test]
    fn files_that_are_not_nbformat_4_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("old.ipynb");
        std::fs::write(&p, r#"{"nbformat": 3, "worksheets": []}"#).unwrap();
        assert!(read(&p).unwrap_err().contains("nbformat 3"));
        std::fs::write(&p, "{").unwrap();
        assert!(read(&p).unwrap_err().contains("not JSON"));
    }
}
