//! `brain run` and `brain check`: a script file, with errors as `file:line:col`, the source line
//! and a caret.

use crate::session::{error_parts, render_error, EntryError, Session};
use rhai::module_resolvers::FileModuleResolver;
use std::path::Path;

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))
}

/// `import "x"` resolves relative to the script's folder.
pub fn resolve_imports_beside(session: &mut Session, script: &Path) {
    let dir = script
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    session
        .engine
        .set_module_resolver(FileModuleResolver::new_with_path(dir));
    // Scripts find the files they ship with (the repository's docs for train_lm.rhai) from
    // wherever they are run.
    let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let text = abs.display().to_string();
    session
        .engine
        .register_fn("script_dir", move || text.clone());
}

/// Runs the script; returns the error report on failure.
pub fn run(session: &mut Session, script: &Path) -> Result<(), String> {
    let src = read(script)?;
    resolve_imports_beside(session, script);
    match session.eval_complete(&src) {
        Ok(_) => Ok(()),
        Err(e) => Err(report(script, &src, &e)),
    }
}

pub fn check(session: &mut Session, script: &Path) -> Result<(), String> {
    let src = read(script)?;
    match session.compile(&src, false) {
        Ok(_) => Ok(()),
        Err(e) => Err(report(script, &src, &e)),
    }
}

fn report(script: &Path, src: &str, e: &EntryError) -> String {
    let (msg, pos) = error_parts(e);
    render_error(&script.display().to_string(), src, pos, &msg)
}
