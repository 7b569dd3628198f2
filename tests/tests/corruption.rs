//! Every file reader against seeded corruptions of a valid file, each case in a child process
//! under a memory cap and a time limit (see `rb_integration_tests::corruption`). Any abort,
//! panic or runaway fails the test; clean errors and harmless loads are what a reader may do.
//!
//! `RB_CORRUPTION_CASES` sets the cases per reader (a few dozen by default; the full run in
//! `docs/baseline.md` used 1,000), `RB_CORRUPTION_READERS` a comma list of readers to run.
//! Failing inputs are kept under the system temp dir, in `rb-corruption-failures/`.

use rb_integration_tests::corruption::child::{run_case, serve_if_child, Outcome};
use rb_integration_tests::corruption::mutate::corrupt;
use rb_integration_tests::corruption::readers::{by_name, Reader, READERS};
use rb_integration_tests::corruption::rng::{case_seed, Rng};
use rb_integration_tests::corruption::samples::{sample, Sample};
use rb_integration_tests::corruption::tally::{table, Tally};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const CHILD_TEST: &str = "corruption_child";
const DEFAULT_CASES: usize = 30;

/// Serves the harness's child processes; in a normal run it does nothing.
#[test]
fn corruption_child() {
    serve_if_child();
}

/// A folder of its own for each worker, removed at the end.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new(tag: &str) -> WorkDir {
        let dir = std::env::temp_dir().join(format!("rb_corruption_{}_{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        WorkDir(dir)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// Writes `bytes` as the reader's file (and the sample's siblings) in `dir`, runs the case.
fn run(binary: &Path, dir: &Path, reader: &Reader, sample: &Sample, bytes: &[u8]) -> Outcome {
    for (name, sibling) in &sample.siblings {
        std::fs::write(dir.join(name), sibling).unwrap();
    }
    let file = dir.join(reader.file_name);
    std::fs::write(&file, bytes).unwrap();
    run_case(binary, CHILD_TEST, reader.name, &file)
}

fn keep_failure(reader: &Reader, index: usize, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join("rb-corruption-failures");
    std::fs::create_dir_all(&dir).ok();
    let path = dir.join(format!(
        "{}-{index}-{}",
        reader.name.replace(' ', "_"),
        reader.file_name
    ));
    std::fs::write(&path, bytes).ok();
    path
}

#[test]
fn every_reader_fails_cleanly_on_corrupt_files() {
    let cases: usize = std::env::var("RB_CORRUPTION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let only = std::env::var("RB_CORRUPTION_READERS").ok();
    let readers: Vec<&Reader> = READERS
        .iter()
        .filter(|r| {
            only.as_ref()
                .is_none_or(|o| o.split(',').any(|n| n.trim() == r.name))
        })
        .collect();
    let binary = std::env::current_exe().unwrap();
    let samples: Vec<Sample> = readers.iter().map(|r| sample(r.name)).collect();

    // The uncorrupted files must load, or the corruptions would test nothing.
    let dir = WorkDir::new("valid");
    for (r, s) in readers.iter().zip(&samples) {
        let outcome = run(&binary, &dir.0, r, s, &s.valid);
        assert_eq!(
            outcome,
            Outcome::Loaded,
            "{}: the valid file does not load",
            r.name
        );
    }

    let jobs: Vec<(usize, usize)> = (0..readers.len())
        .flat_map(|r| (0..cases).map(move |i| (r, i)))
        .collect();
    let next = AtomicUsize::new(0);
    let tallies: Vec<Mutex<Tally>> = readers.iter().map(|_| Mutex::default()).collect();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for w in 0..workers {
            let (jobs, next, tallies, readers, samples, binary) =
                (&jobs, &next, &tallies, &readers, &samples, &binary);
            s.spawn(move || {
                let dir = WorkDir::new(&format!("w{w}"));
                while let Some(&(r, i)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let (reader, sample) = (readers[r], &samples[r]);
                    let mut rng = Rng::new(case_seed(reader.name, i));
                    let c = corrupt(&sample.valid, reader.header_span, reader.semantic, &mut rng);
                    let outcome = run(binary, &dir.0, reader, sample, &c.bytes);
                    let mut case = format!("case {i} ({})", c.what);
                    if !matches!(outcome, Outcome::Loaded | Outcome::Refused) {
                        let kept = keep_failure(reader, i, &c.bytes);
                        case.push_str(&format!(", kept as {}", kept.display()));
                    }
                    tallies[r].lock().unwrap().add(&outcome, &case);
                }
            });
        }
    });

    let rows: Vec<(&str, Tally)> = readers
        .iter()
        .zip(tallies)
        .map(|(r, t)| (r.name, t.into_inner().unwrap()))
        .collect();
    println!(
        "{cases} corruptions per reader, {workers} workers, {:.0} s\n\n{}",
        started.elapsed().as_secs_f64(),
        table(&rows)
    );
    let failures: Vec<String> = rows
        .iter()
        .flat_map(|(name, t)| t.failures.iter().map(move |f| format!("{name}: {f}")))
        .collect();
    assert!(
        failures.is_empty(),
        "{} readers failed:\n{}",
        rows.iter().filter(|(_, t)| t.failed() > 0).count(),
        failures.join("\n")
    );
    // Each reader refuses some corruptions: the harness reaches its checks.
    if cases >= DEFAULT_CASES {
        for (name, t) in &rows {
            assert!(t.refused > 0, "{name}: no corruption was refused");
        }
    }
}

/// Nine levels of ten aliases: 10^9 leaves once expanded, from under a kilobyte.
fn alias_bomb() -> String {
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        bomb.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    bomb
}

/// A tokenizer whose split has a look-behind of unbounded length.
fn lookbehind_tokenizer() -> String {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/tokenizer/hf_gpt2.tokenizer.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["pre_tokenizer"] = serde_json::json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?<=a+)b"}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]});
    doc.to_string()
}

/// The hostile files the trial found in the YOLO-side readers and the tokenizer (issue 42,
/// item 14), each in a child under the memory cap and the time limit: refused, never an abort,
/// a panic or a runaway.
#[test]
fn hostile_files_are_refused_without_an_abort_or_a_runaway() {
    let binary = std::env::current_exe().unwrap();
    let dir = WorkDir::new("hostile");
    let model_yaml = String::from_utf8(sample("model yaml").valid).unwrap();
    let model_yaml = model_yaml.as_str();
    let c3k2 = "[-1, 2, C3k2, [256, False, 0.25]]";
    let repeats =
        |n: &str| model_yaml.replacen(c3k2, &format!("[-1, {n}, C3k2, [256, False, 0.25]]"), 1);
    let cases: Vec<(&str, &str, String)> = vec![
        ("model yaml", "a billion repeats", repeats("1000000000")),
        (
            "model yaml",
            "repeats 2^63 - 1",
            repeats("9223372036854775807"),
        ),
        (
            "model yaml",
            "C2PSA repeats 2^40",
            model_yaml.replace("[-1, 2, C2PSA", "[-1, 1099511627776, C2PSA"),
        ),
        (
            "model yaml",
            "a width of a billion",
            model_yaml.replace("[64, 3, 2]", "[1000000000, 3, 2]"),
        ),
        (
            "model yaml",
            "an alias bomb",
            format!("{}{model_yaml}", alias_bomb()),
        ),
        (
            "data.yaml",
            "an alias bomb",
            format!("{}path: .\nval: val.txt\nnames: [a]\n", alias_bomb()),
        ),
        (
            "data.yaml",
            "a split at /",
            "path: /\nval: .\nnames: [a]\n".into(),
        ),
        (
            "data.yaml",
            "a split at /proc/self",
            "path: /proc/self\nval: .\nnames: [a]\n".into(),
        ),
        (
            "tokenizer.json",
            "an unbounded look-behind",
            lookbehind_tokenizer(),
        ),
    ];
    for (name, what, text) in cases {
        let reader = by_name(name).unwrap();
        assert_ne!(
            text.as_bytes(),
            sample(name).valid.as_slice(),
            "{name}: {what} changed nothing"
        );
        let outcome = run(&binary, &dir.0, reader, &sample(name), text.as_bytes());
        assert_eq!(outcome, Outcome::Refused, "{name}: {what}");
    }
}
