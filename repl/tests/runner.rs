//! `brain run`, `brain check` and `brain notebook` on script files.

mod common;
use common::{brain, text};

fn script(dir: &tempfile::TempDir, name: &str, src: &str) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, src).unwrap();
    p
}

#[test]
fn a_failing_script_names_file_line_and_column_shows_the_line_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(
        &dir,
        "bad.rhai",
        "let a = ones([3]);\nlet b = a.reshape([2, 2]);\n",
    );
    let out = brain(&dir).arg("run").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("bad.rhai:2:11: reshape: shape [2, 2] is invalid for 3 elements"),
        "{stderr}"
    );
    assert!(
        stderr.contains("    let b = a.reshape([2, 2]);\n              ^"),
        "{stderr}"
    );
}

#[test]
fn script_arguments_reach_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(
        &dir,
        "args.rhai",
        "print(arg(\"steps\", 1) * 2);\nprint(ARGS.len());\n",
    );
    let out = brain(&dir)
        .args(["run"])
        .arg(&p)
        .args(["steps=21", "--device", "cpu"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "42\n1\n");
}

#[test]
fn imports_resolve_relative_to_the_script() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("lib")).unwrap();
    script(&dir, "lib/util.rhai", "fn triple(x) { x * 3 }\n");
    let p = script(
        &dir,
        "lib/main.rhai",
        "import \"util\" as u;\nprint(u::triple(5));\n",
    );
    let out = brain(&dir).arg("run").arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "15\n");
}

#[test]
fn check_parses_without_running() {
    let dir = tempfile::tempdir().unwrap();
    let ok = script(&dir, "ok.rhai", "throw \"would fail if run\";\n");
    assert!(brain(&dir)
        .arg("check")
        .arg(&ok)
        .output()
        .unwrap()
        .status
        .success());
    let bad = script(&dir, "bad.rhai", "let = 3;\n");
    let out = brain(&dir).arg("check").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("bad.rhai:1:5"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_explicit_cuda_device_without_a_gpu_fails_with_the_probes_reason() {
    if rusting_brain::Device::cuda_count().is_ok() {
        eprintln!("SKIPPED: this machine has CUDA");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = script(&dir, "x.rhai", "print(zeros([2]).device);\n");
    let out = brain(&dir)
        .arg("run")
        .arg(&p)
        .args(["--device", "cuda"])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a run meant for the GPU must not go to the CPU"
    );
    assert_eq!(text(&out.stdout), "", "the script did not run");
    let reason = rusting_brain::Device::cuda_count().unwrap_err();
    let err = text(&out.stderr);
    assert!(
        err.contains("device cuda:0 is not usable") && err.contains(&reason),
        "{err}"
    );
}

#[test]
fn device_auto_runs_where_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(&dir, "x.rhai", "print(zeros([2]).device);\n");
    let out = brain(&dir)
        .arg("run")
        .arg(&p)
        .args(["--device", "auto"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let expected = match rusting_brain::Device::cuda_count() {
        Ok(_) => "cuda:0",
        Err(_) => "cpu",
    };
    assert_eq!(text(&out.stdout).trim(), expected);
}

#[test]
fn an_error_in_a_namespaced_function_names_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(
        &dir,
        "ns.rhai",
        "let x = 1;\nlet logits = ones([3, 4]);\nlet loss = nn::cross_entropy(logits, ones([5]));\n",
    );
    let out = brain(&dir).arg("run").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("ns.rhai:3:16: cross_entropy: "), "{stderr}");
    assert!(
        stderr
            .contains("    let loss = nn::cross_entropy(logits, ones([5]));\n                   ^"),
        "{stderr}"
    );
}

#[test]
fn cuda_device_flag_puts_new_tensors_on_the_gpu() {
    let Some(_) =
        rusting_brain::Device::cuda_for_test("cuda_device_flag_puts_new_tensors_on_the_gpu")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let p = script(
        &dir,
        "x.rhai",
        "let x = randn([4, 3]); print(x.device); print((x.matmul(x.T)).sum().item() > 0.0);\n",
    );
    let out = brain(&dir)
        .arg("run")
        .arg(&p)
        .args(["--device", "cuda"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "cuda:0\ntrue");
}

#[test]
fn a_notebook_report_holds_each_cells_code_output_and_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(&dir, "nb.rhai", "// %% [markdown]\n// # Demo\n// %%\nlet x = 2;\n// %%\nprint(x * 21);\n// %%\nx.nope();\n// %%\nprint(\"after\");\n");
    let report = dir.path().join("out/report.md");
    let out = brain(&dir)
        .arg("notebook")
        .arg(&p)
        .arg("-o")
        .arg(&report)
        .arg("--keep-going")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failing cell makes the run fail"
    );
    let md = std::fs::read_to_string(&report).unwrap();
    assert!(md.contains("# Demo"), "{md}");
    assert!(md.contains("```rhai\nprint(x * 21);\n```"), "{md}");
    assert!(md.contains("```text\n42\n```"), "{md}");
    assert!(
        md.contains("nb.rhai:8:3"),
        "errors point into the script: {md}"
    );
    assert!(
        md.contains("```text\nafter\n```"),
        "--keep-going runs the rest: {md}"
    );
}

#[test]
fn a_notebook_embeds_the_plots_a_cell_writes_as_image_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(
        &dir,
        "plots.rhai",
        "let xs = [1.0, 0.5, 0.25];\n// %%\nplot::line(xs, #{ path: \"curve.png\" });\n",
    );
    let report = dir.path().join("rep/nb.md");
    let out = brain(&dir)
        .arg("notebook")
        .arg(&p)
        .arg("-o")
        .arg(&report)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let md = std::fs::read_to_string(&report).unwrap();
    assert!(md.contains("](nb_files/01-curve.png)"), "{md}");
    let img = dir.path().join("rep/nb_files/01-curve.png");
    let info = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(img).unwrap()))
        .read_info()
        .unwrap()
        .info()
        .clone();
    assert_eq!((info.width, info.height), (800, 500));
}

#[test]
fn a_notebook_passes_its_arguments_to_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(
        &dir,
        "nb.rhai",
        "let path = arg(\"path\", \"default.csv\");\n// %%\nprint(`reading ${path}`);\n",
    );
    let report = dir.path().join("r.md");
    let out = brain(&dir)
        .arg("notebook")
        .arg(&p)
        .arg("-o")
        .arg(&report)
        .arg("path=other.csv")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let md = std::fs::read_to_string(&report).unwrap();
    assert!(md.contains("```text\nreading other.csv\n```"), "{md}");
    let out = brain(&dir)
        .arg("notebook")
        .arg(&p)
        .arg("-o")
        .arg(&report)
        .arg("paht=other.csv")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a misspelled argument is refused"
    );
}
