//! The Python that reference checks against torch and ultralytics run with: `RB_ULTRALYTICS_PYTHON`,
//! else the development venv at `/work/venv-ul/bin/python` when it exists. Without one that
//! imports torch and ultralytics, a test prints SKIPPED and returns; under `RB_REQUIRE_ASSETS=1`
//! it fails instead, so a run that should check against the reference cannot pass by skipping.

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
    if std::env::var("RB_REQUIRE_ASSETS").as_deref() == Ok("1") {
        panic!("{test}: {why} and RB_REQUIRE_ASSETS=1");
    }
    eprintln!("SKIPPED {test}: {why}");
    None
}
