//! One case in a child process: the parent re-runs its own test binary on the test that
//! serves children, with the reader and the file in the environment; the child caps its
//! address space, reads, and exits with a code that says how the read ended. Whatever else
//! ends the child (a panic's exit code, a signal, the time limit) is the parent's verdict.

use super::readers;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const READER_ENV: &str = "RB_CORRUPTION_READER";
const FILE_ENV: &str = "RB_CORRUPTION_FILE";
/// The memory a read may take beyond what the child holds before it starts.
pub const MEMORY_CAP: usize = 256 << 20;
pub const TIME_LIMIT: Duration = Duration::from_secs(10);
const EXIT_LOADED: i32 = 10;
const EXIT_REFUSED: i32 = 11;
/// What libtest exits with when a test panics.
const EXIT_PANIC: i32 = 101;

/// How a case ended. The last three fail the harness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The reader accepted the corrupt file (the corruption was harmless to it).
    Loaded,
    /// The reader returned an error.
    Refused,
    Panic(String),
    Abort(String),
    /// Past the memory cap (an allocation failed) or the time limit.
    Runaway(String),
}

/// In a child (the environment names a reader): caps memory, reads, and exits. In the parent
/// it returns at once. Called by the one test that serves children.
pub fn serve_if_child() {
    let (Ok(name), Ok(file)) = (std::env::var(READER_ENV), std::env::var(FILE_ENV)) else {
        return;
    };
    let reader = readers::by_name(&name).unwrap_or_else(|| panic!("no reader {name:?}"));
    cap_address_space(MEMORY_CAP);
    match (reader.read)(Path::new(&file)) {
        Ok(()) => std::process::exit(EXIT_LOADED),
        Err(e) => {
            eprintln!("refused: {e}");
            std::process::exit(EXIT_REFUSED)
        }
    }
}

/// Limits the address space to what the process maps now plus `extra`: a read that asks for
/// more gets a failed allocation (an engine error where the engine checks first, else an
/// abort the parent counts as a runaway) instead of the machine's memory.
fn cap_address_space(extra: usize) {
    let mapped = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096);
    let limit = (mapped + extra) as libc::rlim_t;
    let r = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: setrlimit reads one rlimit struct, which `r` is; it changes only this process.
    unsafe {
        libc::setrlimit(libc::RLIMIT_AS, &r);
    }
}

/// Runs `reader` on `file` in a child of `test_binary`, through the test `child_test`.
pub fn run_case(test_binary: &Path, child_test: &str, reader: &str, file: &Path) -> Outcome {
    let spawned = Command::new(test_binary)
        .args([child_test, "--exact", "--nocapture", "--test-threads=1"])
        .env(READER_ENV, reader)
        .env(FILE_ENV, file)
        // One rayon thread and two malloc arenas: the cap then measures the read, not the
        // address space reserved per thread.
        .env("RAYON_NUM_THREADS", "1")
        .env("MALLOC_ARENA_MAX", "2")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Outcome::Abort(format!("could not start the child: {e}")),
    };
    let mut stderr = child.stderr.take();
    let collector = std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_end(&mut text);
        }
        String::from_utf8_lossy(&text).into_owned()
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() > TIME_LIMIT => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => break None,
        }
    };
    let text = collector.join().unwrap_or_default();
    let Some(status) = status else {
        return Outcome::Runaway(format!("still running after {TIME_LIMIT:?}"));
    };
    classify(status, &text)
}

fn classify(status: std::process::ExitStatus, stderr: &str) -> Outcome {
    use std::os::unix::process::ExitStatusExt;
    let tail = tail(stderr);
    match (status.code(), status.signal()) {
        (Some(EXIT_LOADED), _) => Outcome::Loaded,
        (Some(EXIT_REFUSED), _) => Outcome::Refused,
        (Some(EXIT_PANIC), _) => Outcome::Panic(tail),
        (_, Some(_)) if stderr.contains("memory allocation of") => {
            Outcome::Runaway(format!("past the memory cap: {tail}"))
        }
        (_, Some(sig)) => Outcome::Abort(format!("signal {sig}: {tail}")),
        (Some(code), _) => Outcome::Abort(format!("exit code {code}: {tail}")),
        (None, None) => Outcome::Abort(format!("unknown end: {tail}")),
    }
}

/// The last lines of the child's stderr, for the report.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("note:"))
        .collect();
    lines[lines.len().saturating_sub(4)..].join(" | ")
}
