//! The engine's layers, checked. Each top-level module of `engine/src` has a rank; a file may
//! import (`crate::x`) only modules of a lower rank, or, inside the core, the other core
//! modules (the tensor and its autograd graph hold each other). So no import runs upward and no
//! two modules of different layers import each other. docs/architecture.md draws the same
//! layers.
//!
//! Test code is exempt (`tests.rs`, `*_tests.rs`, a `tests/` folder): a test of a lower layer
//! may build its fixture with a higher one, as a crate's tests may use a crate built on it.
//!
//! The second rule is the one door to the device: only the layers that run kernels (the core,
//! ops, the fused optimizers and the collectives) name `backend::cuda`; models, the other
//! engine layers, the bindings and the REPL ask `Device` instead.

use std::path::{Path, PathBuf};

/// Each module's layer; higher ranks build on lower ones.
const RANKS: &[(&str, u32)] = &[
    // The core: tensors, autograd and what every op reads (grad mode, the generator, the
    // cancel flag, the autocast setting).
    ("lib", 0),
    ("tensor", 0),
    ("autograd", 0),
    ("random", 0),
    ("cancel", 0),
    ("amp", 0),
    ("capture", 0),
    // The ops and their backward passes.
    ("ops", 1),
    // Formats, metrics and collectives: no layers, no models.
    ("io", 2),
    ("metrics", 2),
    ("dist", 2),
    // Layers, tokenizers and the gradient checker.
    ("nn", 3),
    ("text", 3),
    ("gradcheck", 3),
    // Optimizers; images and their augmentation; ONNX graphs run as modules.
    ("optim", 4),
    ("graph", 4),
    ("vision", 4),
    // Data sets and loaders.
    ("data", 5),
    // The model families.
    ("models", 6),
];

/// What the crate root re-exports under another name, by the module that defines it.
const ROOT_ITEMS: &[(&str, &str)] = &[
    ("backend", "backend"),
    ("bail", "backend"),
    ("cpu_dispatch", "backend"),
    ("cpu_dispatch2", "backend"),
    ("dtype", "backend"),
    ("error", "backend"),
    ("layout", "backend"),
    ("messages", "backend"),
    ("device", "backend"),
    ("no_grad", "autograd"),
    ("is_grad_enabled", "autograd"),
    ("manual_seed", "random"),
    ("linear_cross_entropy", "ops"),
    ("cross_entropy", "ops"),
    ("bce_with_logits", "ops"),
    ("mse_loss", "ops"),
];

const CORE: u32 = 0;

/// Folders (under the repository root) whose code may name `backend::cuda`.
const KERNEL_LAYERS: &[&str] = &[
    "engine/src/tensor/",
    "engine/src/ops/",
    "engine/src/optim/",
    "engine/src/dist/",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_test_code(relative: &str) -> bool {
    let name = relative.rsplit('/').next().unwrap_or(relative);
    name == "tests.rs" || name.ends_with("_tests.rs") || relative.split('/').any(|p| p == "tests")
}

/// The code of `source` without its comments (line comments and doc comments).
fn code(source: &str) -> String {
    source
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules `source` names through `crate::`, including inside `crate::{..}`
/// groups.
fn crate_imports(source: &str) -> Vec<String> {
    let code = code(source);
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                out.extend(leading_module(item.trim()));
            }
        } else {
            out.extend(leading_module(rest));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The module name at the start of a path (`ops::index::gather` gives `ops`), if it starts
/// with a lower-case name (types such as `Tensor` are the core's).
fn leading_module(path: &str) -> Option<String> {
    let name: String = path
        .chars()
        .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
        .collect();
    (!name.is_empty() && path.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
        .then_some(name)
}

fn rank(module: &str) -> Option<u32> {
    let module = ROOT_ITEMS
        .iter()
        .find(|(item, _)| *item == module)
        .map_or(module, |(_, m)| m);
    if module == "backend" {
        return Some(0);
    }
    RANKS.iter().find(|(m, _)| *m == module).map(|(_, r)| *r)
}

/// The imports of `source`, a file of module `module`, that break the rule, as messages.
fn upward_imports(module: &str, source: &str) -> Vec<String> {
    let Some(own) = rank(module) else {
        return vec![format!("module `{module}` has no rank in RANKS")];
    };
    crate_imports(source)
        .into_iter()
        .filter(|target| target != module && module != "lib")
        .filter_map(|target| match rank(&target) {
            None => Some(format!(
                "imports `crate::{target}`, which has no rank in RANKS"
            )),
            Some(r) if r < own || (r == CORE && own == CORE) || target == "backend" => None,
            Some(r) => Some(format!(
                "`{module}` (rank {own}) imports `crate::{target}` (rank {r})"
            )),
        })
        .collect()
}

#[test]
fn no_engine_module_imports_a_higher_layer() {
    let src = repo().join("engine/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 200, "found only {} files", files.len());
    let mut found = Vec::new();
    for f in &files {
        let relative = f
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if is_test_code(&relative) {
            continue;
        }
        let module = relative
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_string();
        let text = std::fs::read_to_string(f).expect("readable file");
        for problem in upward_imports(&module, &text) {
            found.push(format!("engine/src/{relative}: {problem}"));
        }
    }
    assert!(
        found.is_empty(),
        "imports against the layers (see RANKS in engine/tests/layers.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn only_the_kernel_layers_name_the_cuda_backend() {
    let root = repo();
    let mut files = Vec::new();
    for dir in ["engine/src", "bindings/src", "repl/src", "repl/tests"] {
        rust_files(&root.join(dir), &mut files);
    }
    let found: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let relative = f
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if KERNEL_LAYERS.iter().any(|k| relative.starts_with(k)) {
                return None;
            }
            let text = std::fs::read_to_string(f).expect("readable file");
            code(&text)
                .contains("backend::cuda")
                .then(|| format!("{relative} names backend::cuda; ask `Device` instead"))
        })
        .collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn an_upward_import_is_found_in_a_group_and_a_comment_is_not() {
    let source = "use crate::{ops::index, models::yolo};\n// crate::models is fine here\n";
    let found = upward_imports("nn", source);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("crate::models"), "{found:?}");
    assert!(upward_imports("models", source).is_empty());
    // The core's modules may import each other, and root re-exports count as their module.
    assert!(upward_imports("tensor", "use crate::autograd::Node; crate::no_grad(f)").is_empty());
    assert_eq!(
        upward_imports("tensor", "use crate::cross_entropy;").len(),
        1
    );
}

#[test]
fn test_files_are_told_apart_from_library_files() {
    assert!(is_test_code("vision/tests.rs"));
    assert!(is_test_code("ops/fused_linear_tests.rs"));
    assert!(is_test_code("io/gguf/tests/builder.rs"));
    assert!(!is_test_code("ops/fused_linear.rs"));
    assert!(!is_test_code("models/yolo/train/mod.rs"));
}

/// Files stay small enough to read as one concept: none of the library sources is over 600
/// lines (split one along its seams rather than raise this).
#[test]
fn no_library_source_file_is_over_600_lines() {
    const LIMIT: usize = 600;
    let mut long = Vec::new();
    for dir in ["engine/src", "backend/src", "bindings/src", "repl/src"] {
        let mut files = Vec::new();
        rust_files(&repo().join(dir), &mut files);
        for f in files {
            let lines = std::fs::read_to_string(&f).unwrap().lines().count();
            if lines > LIMIT {
                long.push(format!("{} ({lines} lines)", f.display()));
            }
        }
    }
    assert!(long.is_empty(), "over {LIMIT} lines: {}", long.join(", "));
}
