//! One notebook cell, run for a frontend: the Jupyter kernel (which sends each output as a
//! message while the cell runs) or `brain notebook run x.ipynb` (which stores them in the
//! notebook). Both see the same outputs in the same order: what the cell printed (`stream`),
//! its plots, progress bars and `display(x)` calls (`display_data`, a bar replacing its own
//! output as it advances), the value of its last expression (`execute_result`) or its error.
//! A panic in a cell is caught and reported as the cell's error; the session lives on.

use crate::session::{error_parts, render_error, EntryError, Session};
use base64::Engine as _;
use rhai::Dynamic;
use serde_json::{json, Map as JsonMap, Value};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// What a cell shows, in the order it shows it.
#[derive(Clone, Debug, PartialEq)]
pub enum CellOutput {
    Stream {
        /// `stdout` or `stderr`.
        name: &'static str,
        text: String,
    },
    Display {
        data: JsonMap<String, Value>,
        /// Outputs that change in place (progress bars) carry an id; `update` replaces the
        /// output shown earlier with the same id.
        display_id: Option<String>,
        update: bool,
    },
    Result {
        data: JsonMap<String, Value>,
    },
    Error(CellError),
}

/// A failed cell, in the protocol's terms: a name, the message, and the lines to show (the
/// place as `origin:line:col` with the source line and a caret).
#[derive(Clone, Debug, PartialEq)]
pub struct CellError {
    pub ename: String,
    pub evalue: String,
    pub traceback: Vec<String>,
}

/// Where a running cell's outputs go.
pub trait Frontend: Send + Sync {
    fn emit(&self, output: CellOutput);
    /// A line the user types after `prompt` (`input()`); `None` at the end of the input, an
    /// error when this frontend takes no input.
    fn read_line(&self, prompt: &str) -> Result<Option<String>, String>;
}

static CURRENT: Mutex<Option<Arc<dyn Frontend>>> = Mutex::new(None);

fn current() -> Option<Arc<dyn Frontend>> {
    CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Sends `output` to the frontend of the running cell; false when no cell is running.
pub fn emit(output: CellOutput) -> bool {
    match current() {
        Some(frontend) => {
            frontend.emit(output);
            true
        }
        None => false,
    }
}

/// Routes the bindings' progress bars and `io::read_line` to the running cell's frontend, for
/// as long as this process serves notebooks (the kernel, `brain notebook run`).
pub fn route_bindings_to_frontends() {
    let view: rusting_brain_rhai::progress::LiveView = Arc::new(|u| {
        // What the cell printed before the bar shows above it.
        crate::stdio_capture::sync();
        let mut data = JsonMap::new();
        data.insert("text/plain".into(), u.line.into());
        data.insert(
            "text/html".into(),
            format!(
                "<progress value=\"{}\" max=\"{}\" style=\"width:20em\"></progress> <code>{}</code>",
                u.done,
                u.total.max(1),
                crate::mime::escape(u.line)
            )
            .into(),
        );
        emit(CellOutput::Display {
            data,
            display_id: Some(format!("brain-progress-{}", u.id)),
            update: !u.first,
        });
    });
    rusting_brain_rhai::progress::set_live_view(Some(view));
    rusting_brain_rhai::io::set_line_source(Some(Arc::new(|prompt: &str| match current() {
        Some(frontend) => {
            crate::stdio_capture::sync();
            frontend.read_line(prompt)
        }
        None => Err("no notebook cell is running to ask for input".into()),
    })));
}

/// `display(x)` in a cell: `x` as a rich output (an image for the path of a PNG file); in the
/// REPL and `brain run`, its text.
pub fn display(engine: &rhai::Engine, value: &Dynamic) -> Option<String> {
    let data = match value.clone().into_string() {
        Ok(path) if path.to_ascii_lowercase().ends_with(".png") => {
            image_bundle(std::path::Path::new(&path)).ok()
        }
        _ => None,
    }
    .unwrap_or_else(|| crate::mime::bundle(engine, value));
    crate::stdio_capture::sync();
    let text = data["text/plain"].as_str().unwrap_or_default().to_string();
    let shown = emit(CellOutput::Display {
        data,
        display_id: None,
        update: false,
    });
    (!shown).then_some(text)
}

/// A PNG file as a bundle: the image, and its path as the text.
fn image_bundle(path: &std::path::Path) -> std::io::Result<JsonMap<String, Value>> {
    let bytes = std::fs::read(path)?;
    let mut data = JsonMap::new();
    data.insert(
        "image/png".into(),
        base64::engine::general_purpose::STANDARD
            .encode(bytes)
            .into(),
    );
    data.insert("text/plain".into(), path.display().to_string().into());
    Ok(data)
}

/// Runs `code` in `session` with its outputs going to `frontend`; `origin` names the cell in
/// errors (`analysis.ipynb:In[3]`). `show_result`: whether the last expression's value is an
/// output (not for silent executions).
pub fn run(
    session: &mut Session,
    frontend: Arc<dyn Frontend>,
    code: &str,
    origin: &str,
    show_result: bool,
) -> Result<Option<Dynamic>, CellError> {
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(frontend.clone());
    rusting_brain_rhai::plot::drain_written_plots();
    let result = catch_unwind(AssertUnwindSafe(|| session.eval_complete(code)));
    // Everything printed lands before the plots and the result.
    crate::stdio_capture::sync();
    for plot in rusting_brain_rhai::plot::drain_written_plots() {
        match image_bundle(&plot) {
            Ok(data) => frontend.emit(CellOutput::Display {
                data,
                display_id: None,
                update: false,
            }),
            Err(e) => frontend.emit(CellOutput::Stream {
                name: "stderr",
                text: format!("plot {} could not be read: {e}\n", plot.display()),
            }),
        }
    }
    let outcome = match result {
        Ok(Ok(v)) => {
            if show_result && !v.is_unit() && !ends_with_semicolon(code) {
                frontend.emit(CellOutput::Result {
                    data: crate::mime::bundle(&session.engine, &v),
                });
            }
            Ok(Some(v))
        }
        Ok(Err(e)) => Err(entry_error(&e, code, origin)),
        Err(payload) => Err(panic_error(payload.as_ref())),
    };
    if let Err(e) = &outcome {
        frontend.emit(CellOutput::Error(e.clone()));
    }
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = None;
    outcome
}

/// Whether the cell's last line of code ends in `;`, which hides its value as in IPython
/// (`plot::line(...);` shows the plot, not the path it returns).
fn ends_with_semicolon(code: &str) -> bool {
    code.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("//"))
        .is_some_and(|l| l.ends_with(';'))
}

fn entry_error(e: &EntryError, code: &str, origin: &str) -> CellError {
    let (message, pos) = error_parts(e);
    let ename = match e {
        EntryError::Incomplete | EntryError::Parse(_) => "ParseError",
        EntryError::Runtime(_) if message == "interrupted" || message == "cancelled" => {
            "Interrupted"
        }
        EntryError::Runtime(_) => "RuntimeError",
    };
    CellError {
        ename: ename.into(),
        traceback: render_error(origin, code, pos, &message)
            .lines()
            .map(String::from)
            .collect(),
        evalue: message,
    }
}

fn panic_error(payload: &(dyn std::any::Any + Send)) -> CellError {
    let what = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic with no message".into());
    let evalue = format!("the engine panicked: {what} (this is a bug; the session goes on)");
    CellError {
        ename: "Panic".into(),
        traceback: vec![evalue.clone()],
        evalue,
    }
}

/// An nbformat output object (as `.ipynb` files store them) for an output, given the cell's
/// execution count.
pub fn nbformat_output(output: &CellOutput, execution_count: Option<u64>) -> Value {
    match output {
        CellOutput::Stream { name, text } => {
            json!({"output_type": "stream", "name": name, "text": text})
        }
        CellOutput::Display { data, .. } => {
            json!({"output_type": "display_data", "data": data, "metadata": {}})
        }
        CellOutput::Result { data } => json!({
            "output_type": "execute_result",
            "execution_count": execution_count,
            "data": data,
            "metadata": {}
        }),
        CellOutput::Error(e) => json!({
            "output_type": "error",
            "ename": e.ename,
            "evalue": e.evalue,
            "traceback": e.traceback
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Collects results and errors in memory (other tests' plots, drained from the one
    /// process-wide list, may land here too, so those are left out).
    #[derive(Default)]
    struct Recorder(Mutex<Vec<CellOutput>>);

    impl Frontend for Recorder {
        fn emit(&self, output: CellOutput) {
            if matches!(output, CellOutput::Result { .. } | CellOutput::Error(_)) {
                self.0.lock().unwrap().push(output);
            }
        }
        fn read_line(&self, _prompt: &str) -> Result<Option<String>, String> {
            Ok(None)
        }
    }

    fn session() -> Session {
        let mut engine = rusting_brain_rhai::new_engine();
        engine.register_fn("engine_bug", || -> i64 { panic!("index out of range") });
        Session::new(engine)
    }

    #[test]
    fn a_panic_in_a_cell_is_its_error_and_the_session_keeps_its_variables() {
        let mut s = session();
        let rec = Arc::new(Recorder::default());
        run(&mut s, rec.clone(), "let kept = 7;", "In[1]", true).unwrap();
        let err = run(&mut s, rec.clone(), "engine_bug()", "In[2]", true).unwrap_err();
        assert_eq!(err.ename, "Panic");
        assert!(err.evalue.contains("index out of range"), "{}", err.evalue);
        let v = run(&mut s, rec.clone(), "kept * 6", "In[3]", true).unwrap();
        assert_eq!(v.unwrap().as_int().unwrap(), 42);
        let outputs = rec.0.lock().unwrap();
        assert!(matches!(&outputs[0], CellOutput::Error(e) if e.ename == "Panic"));
        assert!(matches!(&outputs[1], CellOutput::Result { data } if data["text/plain"] == "42"));
    }

    #[test]
    fn a_trailing_semicolon_hides_the_value_as_in_ipython() {
        assert!(ends_with_semicolon("let a = 1;\nplot(a); \n// a comment\n"));
        assert!(!ends_with_semicolon("let a = 1;\na\n"));
        let mut s = session();
        let rec = Arc::new(Recorder::default());
        run(&mut s, rec.clone(), "1 + 1;", "In[1]", true).unwrap();
        run(&mut s, rec.clone(), "1 + 2", "In[2]", true).unwrap();
        let outputs = rec.0.lock().unwrap();
        assert_eq!(outputs.len(), 1, "{outputs:?}");
        assert!(matches!(&outputs[0], CellOutput::Result { data } if data["text/plain"] == "3"));
    }
}
