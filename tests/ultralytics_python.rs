//! The Python that reference checks against torch and ultralytics run with: `RB_ULTRALYTICS_PYTHON`,
//! else the development venv at `/work/venv-ul/bin/python` when it exists. Without one that
//! imports torch and ultralytics, a test prints SKIPPED and returns, as the onnxruntime and gguf
//! checks do: torch is not installed for CI (the guide keeps torch to the development and GPU
//! machines), so `RB_REQUIRE_ASSETS=1` does not make it a failure. When `RB_ULTRALYTICS_PYTHON`
//! names a Python that cannot import them, the test fails: a run that asked for the reference
//! cannot pass by skipping.

use std::path::Path;
use std::process::Command;

const DEFAULT: &str = "/work/venv-ul/bin/python";

/// The Python to run, or `None` after printing why the test skips.
pub fn ultralytics_python(test: &str) -> Option<String> {
    let py = std::env::var("RB_ULTRALYTICS_PYTHON")
        .ok()
        .or_else(|| Path::new(DEFAULT).exists().then(|| DEFAULT.to_string()));
    let usable = py.as_ref().is_some_and(|py| {
        Command::new(py)
            .args(["-c", "import ultralytics, torch"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if usable {
        return py;
    }
    let why = "no Python with torch and ultralytics (set RB_ULTRALYTICS_PYTHON)";
    if let Ok(asked) = std::env::var("RB_ULTRALYTICS_PYTHON") {
        panic!("{test}: RB_ULTRALYTICS_PYTHON={asked} cannot import torch and ultralytics");
    }
    eprintln!("SKIPPED {test}: {why}");
    None
}
