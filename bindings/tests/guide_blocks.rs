//! Every ```` ```rhai ```` code block of every guide in `docs/guide/*.md` runs here, so the
//! guides cannot drift from the bindings.
//!
//! - Each guide runs in a fresh engine (as the REPL builds it), in a fresh temporary working
//!   directory, so the files its examples write (plots, checkpoints, CSVs) land there and not
//!   in the repository. Its blocks run in order in one scope, as cells of a notebook or lines of
//!   the REPL: a later block may use the variables and the functions of an earlier one (the
//!   functions carry over as the REPL carries them, closures included).
//! - ```` ```rhai,no_run ```` (or `rhai no_run`) marks a block that needs what a test cannot
//!   have: a real corpus or dataset, weights, a GPU, or minutes of training. It is only
//!   compiled, which still catches syntax errors; its variables are not defined for later
//!   blocks.
//! - An HTML comment that starts with `<!-- rhai setup` holds code that runs, unseen by readers,
//!   before the blocks after it: it writes the small files a block reads (`iris.csv`, `x.npy`).
//!
//! Blocks in other languages (```` ```sh ````, ```` ```text ````) are left alone.

use std::path::{Path, PathBuf};

/// How a piece of a guide is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Run,
    CompileOnly,
    Setup,
}

/// A piece of Rhai taken from a guide, with the line it starts at (1-based).
#[derive(Debug)]
struct Block {
    line: usize,
    mode: Mode,
    code: String,
}

/// The Rhai blocks and setup comments of a markdown text, in order.
fn rhai_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, Option<Mode>, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some((start, mode, code)) = open.as_mut() {
            let closes = match mode {
                Some(Mode::Setup) => trimmed.starts_with("-->"),
                _ => trimmed.starts_with("```"),
            };
            if closes {
                if let Some(mode) = *mode {
                    blocks.push(Block {
                        line: *start,
                        mode,
                        code: std::mem::take(code),
                    });
                }
                open = None;
            } else {
                code.push_str(line);
                code.push('\n');
            }
        } else if let Some(info) = trimmed.strip_prefix("```") {
            open = Some((i + 1, fence_mode(info), String::new()));
        } else if trimmed.starts_with("<!-- rhai setup") {
            open = Some((i + 1, Some(Mode::Setup), String::new()));
        }
    }
    blocks
}

/// The mode of a fence's info string (`rhai`, `rhai,no_run`, `rhai no_run`); `None` for
/// other languages.
fn fence_mode(info: &str) -> Option<Mode> {
    let mut words = info
        .split([',', ' '])
        .map(str::trim)
        .filter(|w| !w.is_empty());
    if words.next() != Some("rhai") {
        return None;
    }
    if words.any(|w| w == "no_run") {
        Some(Mode::CompileOnly)
    } else {
        Some(Mode::Run)
    }
}

fn guides() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guide");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    paths.sort();
    paths
}

/// Runs one guide's blocks; returns `file:line: error` for each block that fails, and the
/// number of blocks run and compiled.
fn check_guide(path: &Path) -> (Vec<String>, usize, usize) {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let text = std::fs::read_to_string(path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    let mut engine = rusting_brain_rhai::new_engine();
    engine.on_print(|_| {});
    let mut scope = rhai::Scope::new();
    let mut functions = rhai::AST::empty();
    let (mut failures, mut ran, mut compiled) = (Vec::new(), 0, 0);
    for block in rhai_blocks(&text) {
        let result = match block.mode {
            Mode::CompileOnly => {
                compiled += 1;
                engine
                    .compile(&block.code)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            Mode::Run | Mode::Setup => {
                ran += usize::from(block.mode == Mode::Run);
                match engine.compile_with_scope(&scope, &block.code) {
                    Ok(ast) => {
                        let run = engine.run_ast_with_scope(&mut scope, &functions.merge(&ast));
                        functions = functions.merge(&ast.clone_functions_only());
                        run.map_err(|e| e.to_string())
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        if let Err(e) = result {
            failures.push(format!(
                "{name}:{}: {:?} block: {e}",
                block.line, block.mode
            ));
        }
    }
    (failures, ran, compiled)
}

/// The only test here that changes the working directory (each guide runs in its own).
#[test]
fn every_rhai_block_of_every_guide_runs() {
    let mut failures = Vec::new();
    let mut counts = Vec::new();
    for path in guides() {
        let (f, ran, compiled) = check_guide(&path);
        failures.extend(f);
        counts.push((
            path.file_name().unwrap().to_string_lossy().into_owned(),
            ran,
            compiled,
        ));
    }
    println!("guide blocks (run, compiled only): {counts:?}");
    assert!(
        failures.is_empty(),
        "{} guide blocks fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let tabular = counts.iter().find(|(n, _, _)| n == "tabular.md");
    assert!(
        tabular.is_some_and(|&(_, ran, _)| ran > 0),
        "docs/guide/tabular.md must exist and have a block that runs: {counts:?}"
    );
}

#[test]
fn fences_are_read_as_run_compile_only_setup_or_other() {
    let md = "text\n```rhai\nlet a = 1;\n```\n```rhai,no_run\nlet b = 2;\n```\n\
              ```rhai no_run\nlet c = 3;\n```\n```sh\nls\n```\n<!-- rhai setup\nlet d = 4;\n-->\n";
    let blocks = rhai_blocks(md);
    let modes: Vec<(usize, Mode, &str)> = blocks
        .iter()
        .map(|b| (b.line, b.mode, b.code.trim()))
        .collect();
    assert_eq!(
        modes,
        [
            (2, Mode::Run, "let a = 1;"),
            (5, Mode::CompileOnly, "let b = 2;"),
            (8, Mode::CompileOnly, "let c = 3;"),
            (14, Mode::Setup, "let d = 4;"),
        ]
    );
}
