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
/// A REPL session on the CPU (so printed tensors say `device=cpu` on a GPU machine too). Every
/// session also saves its entries (`:save`) and checks that the script parses (`brain check`):
/// what a session ran is a script that runs. The save's own line is left out of the output.
pub fn repl_session(input: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("session.rhai");
    let mut child = brain(&dir)
        .args(["--device", "cpu"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    // A session that quits itself never reads this; it saves nothing and is not checked.
    let _ = write!(stdin, "\n:save {}\n", saved.display());
    drop(stdin);
    let mut out = child.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    let body = stdout.trim_end();
    let cut = body.rfind('\n').map_or(0, |i| i + 1);
    if body[cut..].starts_with("saved ") {
        out.stdout = stdout.as_bytes()[..cut].to_vec();
    }
    if saved.exists() {
        let check = brain(&dir).arg("check").arg(&saved).output().unwrap();
        assert!(
            check.status.success(),
            "the saved session does not parse:\n{}\n{}",
            std::fs::read_to_string(&saved).unwrap(),
            text(&check.stderr)
        );
    }
    out
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
