//! Helpers for driving the `brain` binary: found through BRAIN_BIN (packed test runs on another
//! machine) or cargo's build of it, with history and outputs in temporary folders.

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

pub fn brain_bin() -> PathBuf {
    std::env::var_os("BRAIN_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_brain")))
}

pub fn brain(dir: &tempfile::TempDir) -> Command {
    let mut c = Command::new(brain_bin());
    c.current_dir(dir.path())
        .env("BRAIN_HISTORY", dir.path().join("history"))
        .env_remove("RB_REQUIRE_CUDA");
    c
}

/// Feeds `input` to a REPL on stdin and returns its output.
/// A REPL session on the CPU (so printed tensors say `device=cpu` on a GPU machine too).
pub fn repl_session(input: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut child = brain(&dir)
        .args(["--device", "cpu"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
