//! Help that is checked: every recorded example runs, and every signature shows as many
//! parameters as the function it documents takes.

use rusting_brain_rhai::help::{self, check};

/// The entries of an engine built as the REPL builds it (its registration records them).
fn entries() -> Vec<help::HelpEntry> {
    let _engine = rusting_brain_rhai::new_engine();
    help::entries()
}

#[test]
fn every_help_example_runs_in_a_fresh_engine() {
    let entries = entries();
    assert!(entries.len() > 100, "only {} entries", entries.len());
    // Examples write their files (checkpoints, plots, token files) where they run. This is
    // the only test in this binary that uses the working directory.
    let dir = tempfile::tempdir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    let failures = check::run_examples(&entries, rusting_brain_rhai::new_engine);
    assert!(
        failures.is_empty(),
        "{} of {} help examples fail:\n{}",
        failures.len(),
        entries.len(),
        failures.join("\n")
    );
}

#[test]
fn every_help_signature_has_the_registered_number_of_parameters() {
    let entries = entries();
    let engine = rusting_brain_rhai::new_engine();
    let problems = check::check_signatures(&entries, &engine);
    assert!(
        problems.is_empty(),
        "{} help signatures disagree with their functions:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
