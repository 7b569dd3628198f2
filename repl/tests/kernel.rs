//! The Jupyter kernel driven by the reference clients, jupyter_client and nbclient
//! (`tests/jupyter/client_checks.py`), through a kernelspec that `brain kernel install` writes
//! into a temporary prefix. The Python is `RB_JUPYTER_PYTHON` (`.ci/run` makes a venv with
//! both), else `python3`; without those packages each test says SKIPPED, and fails instead under
//! `RB_REQUIRE_JUPYTER=1`.

mod common;

use common::{brain, text};
use std::path::{Path, PathBuf};
use std::process::Command;

fn python() -> String {
    std::env::var("RB_JUPYTER_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn has_clients(py: &str) -> bool {
    Command::new(py)
        .args(["-c", "import jupyter_client, nbclient, nbformat"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn checks_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jupyter/client_checks.py")
}

/// Installs the kernelspec into a fresh prefix and runs one check of `client_checks.py` there;
/// returns what it printed. `None`: skipped (no clients).
fn check(name: &str, args: &[&str]) -> Option<String> {
    let py = python();
    if !has_clients(&py) {
        assert!(
            std::env::var("RB_REQUIRE_JUPYTER").as_deref() != Ok("1"),
            "{py} cannot import jupyter_client, nbclient and nbformat (RB_REQUIRE_JUPYTER=1)"
        );
        eprintln!("SKIPPED {name}: {py} cannot import jupyter_client and nbclient (set RB_JUPYTER_PYTHON)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    let install = brain(&dir)
        .args(["kernel", "install", "--prefix"])
        .arg(&prefix)
        .args(["--device", "cpu"])
        .output()
        .unwrap();
    assert!(install.status.success(), "{}", text(&install.stderr));
    let out = Command::new(&py)
        .arg(checks_script())
        .arg(name)
        .args(args)
        .current_dir(dir.path())
        .env("JUPYTER_PATH", prefix.join("share/jupyter"))
        .env("JUPYTER_RUNTIME_DIR", dir.path().join("runtime"))
        .env("JUPYTER_PLATFORM_DIRS", "1")
        .env_remove("RB_REQUIRE_CUDA")
        .output()
        .unwrap();
    let printed = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "check {name} failed:\n{printed}");
    eprintln!("{printed}");
    Some(printed)
}

#[test]
fn the_kernel_answers_kernel_info_as_rhai_over_protocol_5_3() {
    check("kernel_info", &[]);
}

#[test]
fn nbclient_runs_the_tabular_notebook_with_streams_tables_a_progress_bar_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let notebook = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/notebooks/tabular.ipynb");
    let out = dir.path().join("tabular.ipynb");
    let (nb, out) = (notebook.to_str().unwrap(), out.to_str().unwrap());
    if check("notebook", &[nb, out]).is_some() {
        assert!(
            dir.path().join("out/loss.png").exists(),
            "the plot files are written too"
        );
    }
}

#[test]
fn an_interrupt_request_stops_a_long_cell_within_a_second_and_keeps_the_scope() {
    check("interrupt", &["message"]);
}

#[test]
fn sigint_stops_a_long_cell_within_a_second_and_keeps_the_scope() {
    check("interrupt", &["signal"]);
}

#[test]
fn completion_follows_types_and_namespaces_and_inspection_gives_help() {
    check("complete_inspect", &[]);
}

#[test]
fn an_error_names_cell_line_and_column_and_the_session_goes_on() {
    check("errors", &[]);
}

#[test]
fn input_asks_the_frontend_over_the_stdin_channel() {
    check("stdin", &[]);
}

#[test]
fn a_progress_bar_is_one_output_updated_in_place() {
    check("progress", &[]);
}

#[test]
fn a_killed_kernel_is_reported_dead_by_nbclient_not_waited_on() {
    check("dead_kernel", &[]);
}

#[test]
fn restart_gives_a_fresh_session_and_shutdown_ends_the_process() {
    check("restart", &[]);
}

#[test]
fn a_kernel_whose_frontend_was_killed_exits_by_itself() {
    check("orphan", &[]);
}

#[test]
fn notebooks_convert_from_scripts_and_run_in_place_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.rhai"),
        "// %% [markdown]\n// # A\n// %%\nlet x = 2;\nprint(\"printed\");\nx * 21\n// %%\nplot::line([1.0, 2.0, 3.0], #{ path: \"p.png\" });\n",
    )
    .unwrap();
    let convert = brain(&dir)
        .args(["notebook", "a.rhai", "--to", "ipynb"])
        .output()
        .unwrap();
    assert!(convert.status.success(), "{}", text(&convert.stderr));
    let run = brain(&dir)
        .args(["--device", "cpu", "notebook", "run", "a.ipynb"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(
        text(&run.stdout).contains("wrote a.ipynb"),
        "{}",
        text(&run.stdout)
    );
    let nb: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("a.ipynb")).unwrap())
            .unwrap();
    let first = &nb["cells"][1]["outputs"];
    assert_eq!(first[0]["output_type"], "stream");
    assert_eq!(first[0]["text"], "printed\n");
    assert_eq!(first[1]["data"]["text/plain"], "42");
    let second = &nb["cells"][2]["outputs"];
    assert!(second[0]["data"]["image/png"].is_string(), "{second}");
    assert_eq!(
        second.as_array().unwrap().len(),
        1,
        "`;` hides the returned path"
    );
    // The Markdown report reads a notebook too.
    let report = brain(&dir)
        .args(["--device", "cpu", "notebook", "a.ipynb", "-o", "r.md"])
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", text(&report.stderr));
    let md = std::fs::read_to_string(dir.path().join("r.md")).unwrap();
    assert!(md.contains("printed") && md.contains("42"), "{md}");
    let back = brain(&dir)
        .args(["notebook", "a.ipynb", "--to", "rhai", "-o", "b.rhai"])
        .output()
        .unwrap();
    assert!(back.status.success(), "{}", text(&back.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("b.rhai")).unwrap(),
        std::fs::read_to_string(dir.path().join("a.rhai")).unwrap()
    );
}
