//! The CUDA backend imports nothing from the CPU backend's kernels. (The backends as a whole
//! cannot import upward: they are a crate below the engine, so the compiler refuses.) The only
//! CPU type the CUDA side may name is `CpuStorage`, the host end of a transfer, through the
//! crate root.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Lines of code that reach into the CPU backend: `crate::cpu`, `super::cpu` or
/// `super::super::cpu` paths, comments aside.
fn cpu_imports(source: &str) -> Vec<String> {
    source
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .filter(|code| {
            ["crate::cpu", "super::cpu", "super::super::cpu"]
                .iter()
                .any(|p| code.contains(p))
        })
        .map(|code| code.trim().to_string())
        .collect()
}

#[test]
fn the_cuda_backend_does_not_import_the_cpu_backend() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cuda"),
        &mut files,
    );
    assert!(files.len() > 10, "found only {} files", files.len());
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).expect("readable file");
            cpu_imports(&text)
                .into_iter()
                .map(move |l| format!("{}: {l}", f.display()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "CUDA backend imports from the CPU backend:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_cpu_import_is_found_and_a_comment_is_not() {
    let src = "use crate::cpu::map::gather;\n// see crate::cpu for the reference\nlet x = 1;";
    assert_eq!(cpu_imports(src), vec!["use crate::cpu::map::gather;"]);
}
