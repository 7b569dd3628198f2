//! The arguments a script declares, found before it runs: `brain run` refuses a `name=value` the
//! script does not read, and `brain run script.rhai --help` lists the ones it does.
//!
//! A script declares an argument by reading it: `arg("steps", 200)` or, with a line for the
//! help, `arg("steps", 200, "training steps")`. The declarations are collected by a pass over
//! the compiled script (and the files it imports, since `scripts/lib/` reads arguments too),
//! not by running it: running would start the work (a training run) before an unknown
//! argument could be refused, and a collecting mode that stops early cannot know which
//! `arg` calls a later branch would make. The pass sees every call, in every branch and
//! function, so the list is complete as long as each name is a string literal, which the pass
//! requires (a computed name is an error that points at the call). A script that reads the raw
//! `ARGS` array (or `script_args()`) parses its own arguments, and is not checked.

use crate::session::render_error;
use rhai::{ASTNode, Dynamic, Engine, Expr, Position, Stmt};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One `arg(name, default[, doc])` call.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    pub name: String,
    /// The default as the script wrote it (a literal's value, else the expression's text).
    pub default: String,
    pub doc: Option<String>,
}

/// What a script reads from its command line.
#[derive(Debug, Default, PartialEq)]
pub struct ScriptArgs {
    /// In the order the script first reads them; a name read twice is listed once.
    pub declared: Vec<Declared>,
    /// The script reads `ARGS` or `script_args()` itself.
    pub reads_raw: bool,
}

/// Collects the arguments `script` (whose text is `src`) and the files it imports declare.
/// Errors (a file that does not parse, an `arg` whose name is not a literal) come rendered as
/// `file:line:col: message` with the line and a caret.
pub fn collect(engine: &Engine, script: &Path, src: &str) -> Result<ScriptArgs, String> {
    let dir = script
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let mut found = ScriptArgs::default();
    let mut visited = BTreeSet::new();
    collect_file(engine, &dir, script, src, &mut found, &mut visited)?;
    Ok(found)
}

fn collect_file(
    engine: &Engine,
    dir: &Path,
    file: &Path,
    src: &str,
    found: &mut ScriptArgs,
    visited: &mut BTreeSet<PathBuf>,
) -> Result<(), String> {
    visited.insert(std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf()));
    let origin = file.display().to_string();
    let ast = engine
        .compile(src)
        .map_err(|e| render_error(&origin, src, e.1, &e.0.to_string()))?;
    let mut imports = Vec::new();
    let mut problem = None;
    ast.walk(&mut |path: &[ASTNode]| {
        match path.last() {
            // A call is an expression, or a statement of its own (`arg("x", 1);`).
            Some(ASTNode::Expr(Expr::FnCall(call, pos)))
            | Some(ASTNode::Stmt(Stmt::FnCall(call, pos)))
                if !call.is_qualified() =>
            {
                match call.name.as_str() {
                    "arg" => match declaration(&call.args, src) {
                        Some(d) => {
                            if !found.declared.iter().any(|x| x.name == d.name) {
                                found.declared.push(d);
                            }
                        }
                        None => {
                            problem = Some(render_error(
                                &origin,
                                src,
                                *pos,
                                "arg's name must be a string literal, so that `brain run` can \
                                 check and list the script's arguments",
                            ));
                            return false;
                        }
                    },
                    "script_args" => found.reads_raw = true,
                    _ => {}
                }
            }
            Some(ASTNode::Expr(Expr::Variable(v, ..))) if v.1 == "ARGS" && v.2.is_empty() => {
                found.reads_raw = true;
            }
            Some(ASTNode::Stmt(Stmt::Import(x, _))) => {
                if let Expr::StringConstant(path, _) = &x.0 {
                    imports.push(path.to_string());
                }
            }
            _ => {}
        }
        true
    });
    if let Some(p) = problem {
        return Err(p);
    }
    // Imports resolve beside the script (see runner::resolve_imports_beside); one that cannot
    // be read is left for the run to report where it is imported.
    for import in imports {
        let path = rhai::module_resolvers::FileModuleResolver::new_with_path(dir)
            .get_file_path(&import, None);
        let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if visited.contains(&canonical) {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(&path) {
            collect_file(engine, dir, &path, &text, found, visited)?;
        }
    }
    Ok(())
}

/// The declaration in an `arg(...)` call's arguments, or `None` when the name is not a literal.
fn declaration(args: &[Expr], src: &str) -> Option<Declared> {
    let Some(Expr::StringConstant(name, _)) = args.first() else {
        return None;
    };
    let default = match args.get(1) {
        Some(e) => match e.get_literal_value(None) {
            Some(v) => shown(&v),
            None => expression_text(src, start_of(e)),
        },
        None => String::new(),
    };
    let doc = match args.get(2) {
        Some(Expr::StringConstant(s, _)) => Some(s.to_string()),
        _ => None,
    };
    Some(Declared {
        name: name.to_string(),
        default,
        doc,
    })
}

/// Where an expression's text begins: Rhai places an operator call at its operator, the text
/// starts at its left operand.
fn start_of(e: &Expr) -> Position {
    match e {
        Expr::FnCall(call, _) if call.op_token.is_some() && !call.args.is_empty() => {
            start_of(&call.args[0])
        }
        _ => e.start_position(),
    }
}

/// A default as a user would type it: strings in quotes, `()` (no default) as nothing.
fn shown(v: &Dynamic) -> String {
    if v.is_unit() {
        String::new()
    } else if v.is_string() {
        format!("{:?}", v.to_string())
    } else {
        v.to_string()
    }
}

/// The text of an argument expression starting at `pos`: up to the `,` or `)` that ends it at
/// its own bracket depth, strings skipped.
fn expression_text(src: &str, pos: Position) -> String {
    let (Some(line), Some(col)) = (pos.line(), pos.position()) else {
        return "(computed)".into();
    };
    let start: usize = src
        .split_inclusive('\n')
        .take(line - 1)
        .map(str::len)
        .sum::<usize>()
        + src
            .lines()
            .nth(line - 1)
            .map_or(0, |l| l.chars().take(col - 1).map(char::len_utf8).sum());
    let rest = src.get(start..).unwrap_or("");
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let mut end = rest.len();
    let mut escaped = false;
    for (i, c) in rest.char_indices() {
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                _ if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '"' | '`' | '\'' => quote = Some(c),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => {
                end = i;
                break;
            }
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    rest[..end].split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The names given on the command line, in the spellings `arg` reads (`name=value`,
/// `--name=value`, `--name value`, `name value`), with anything that names no declared
/// argument reported as it was written.
fn given_names<'a>(given: &'a [String], declared: &[Declared]) -> Vec<&'a str> {
    let known = |n: &str| declared.iter().any(|d| d.name == n);
    let mut names = Vec::new();
    let mut i = 0;
    while i < given.len() {
        let a = given[i].trim_start_matches("--");
        match a.split_once('=') {
            Some((k, _)) => names.push(k),
            None if known(a) => {
                names.push(a);
                i += 1; // its value
            }
            None => names.push(given[i].as_str()),
        }
        i += 1;
    }
    names
}

/// Refuses an argument the script does not declare, naming the ones it does.
pub fn check(script: &Path, given: &[String], args: &ScriptArgs) -> Result<(), String> {
    if args.reads_raw {
        return Ok(());
    }
    let unknown: Vec<&str> = given_names(given, &args.declared)
        .into_iter()
        .filter(|n| !args.declared.iter().any(|d| d.name == *n))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let script = script.display();
    let list = unknown
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let what = if unknown.len() == 1 {
        "unknown argument"
    } else {
        "unknown arguments"
    };
    if args.declared.is_empty() {
        return Err(format!("{what} {list}: {script} takes no arguments"));
    }
    let known: Vec<&str> = args.declared.iter().map(|d| d.name.as_str()).collect();
    let hint = match rusting_brain_rhai::suggest::did_you_mean(unknown[0], known.iter().copied()) {
        Some(near) => format!(" (did you mean `{near}`?)"),
        None => String::new(),
    };
    Err(format!(
        "{what} {list}{hint} for {script}; it takes {}\n(brain run {script} --help shows their defaults)",
        known.join(", ")
    ))
}

/// `brain run script.rhai --help`: the script's opening comment and its arguments.
pub fn help(command: &str, script: &Path, src: &str, args: &ScriptArgs) -> String {
    let mut out = format!(
        "usage: brain {command} {} [name=value ...]\n",
        script.display()
    );
    // The script's leading comment, without a notebook's cell markers (`// %% [markdown]`).
    let about: Vec<&str> = src
        .lines()
        .map_while(|l| l.trim_start().strip_prefix("//"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .filter(|l| !l.starts_with("%%"))
        .collect();
    if !about.is_empty() {
        out.push('\n');
        for l in about {
            out.push_str(l);
            out.push('\n');
        }
    }
    if args.reads_raw {
        out.push_str("\nThe script reads its arguments from ARGS itself.\n");
    }
    if args.declared.is_empty() {
        if !args.reads_raw {
            out.push_str("\nThe script takes no arguments.\n");
        }
        return out;
    }
    out.push_str("\narguments (name=value; the value after = is the default):\n");
    let cells: Vec<String> = args
        .declared
        .iter()
        .map(|d| format!("{}={}", d.name, d.default))
        .collect();
    let width = cells.iter().map(|c| c.chars().count()).max().unwrap_or(0);
    for (cell, d) in cells.iter().zip(&args.declared) {
        match &d.doc {
            Some(doc) => out.push_str(&format!("  {cell:width$}  {doc}\n")),
            None => out.push_str(&format!("  {cell}\n")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect_src(src: &str) -> Result<ScriptArgs, String> {
        collect(&Engine::new(), Path::new("s.rhai"), src)
    }

    #[test]
    fn literal_arg_calls_are_found_in_branches_and_functions_with_defaults_and_docs() {
        let args = collect_src(
            "let a = arg(\"steps\", 200);\n\
             fn f(p) { if p { arg(\"lr\", 0.1, \"learning rate\") } else { arg(\"out\", \"o\") } }\n\
             let b = arg(\"steps\", 5);\nlet c = arg(\"n\", a * 2);\nlet d = arg(\"size\", ());\n",
        )
        .unwrap();
        let shown: Vec<(String, String, Option<String>)> = args
            .declared
            .iter()
            .map(|d| (d.name.clone(), d.default.clone(), d.doc.clone()))
            .collect();
        let expect = |n: &str, d: &str, doc: Option<&str>| {
            (n.to_string(), d.to_string(), doc.map(str::to_string))
        };
        assert_eq!(
            shown,
            [
                expect("steps", "200", None),
                expect("n", "a * 2", None),
                expect("size", "", None),
                expect("lr", "0.1", Some("learning rate")),
                expect("out", "\"o\"", None),
            ]
        );
        assert!(!args.reads_raw);
    }

    #[test]
    fn a_computed_argument_name_is_an_error_at_the_call() {
        let err = collect_src("let k = \"steps\";\nlet s = arg(k, 1);\n").unwrap_err();
        assert!(
            err.starts_with("s.rhai:2:9: arg's name must be a string literal"),
            "{err}"
        );
    }

    #[test]
    fn unknown_arguments_are_refused_with_the_known_ones_listed() {
        let args =
            collect_src("let a = arg(\"steps\", 1); let b = arg(\"corpus\", \"\");").unwrap();
        let given = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let script = Path::new("t.rhai");
        assert!(check(script, &given(&["steps=3", "--corpus", "x"]), &args).is_ok());
        let err = check(script, &given(&["corpus=a", "data=b"]), &args).unwrap_err();
        assert!(
            err.starts_with("unknown argument `data` for t.rhai; it takes steps, corpus"),
            "{err}"
        );
        let err = check(script, &given(&["stpes=3"]), &args).unwrap_err();
        assert!(
            err.starts_with("unknown argument `stpes` (did you mean `steps`?) for t.rhai"),
            "{err}"
        );
        let none = collect_src("print(1);").unwrap();
        let err = check(script, &given(&["x=1"]), &none).unwrap_err();
        assert!(err.contains("t.rhai takes no arguments"), "{err}");
    }

    #[test]
    fn a_script_that_reads_args_itself_is_not_checked() {
        let args = collect_src("print(ARGS.len());").unwrap();
        assert!(args.reads_raw);
        assert!(check(Path::new("t.rhai"), &["anything".to_string()], &args).is_ok());
    }

    #[test]
    fn help_lists_the_opening_comment_and_each_argument_with_its_default() {
        let src = "// Trains a thing.\n//   more\nlet s = arg(\"steps\", 10, \"how long\");\nlet o = arg(\"out\", \"out\");\n";
        let args = collect_src(src).unwrap();
        let text = help("run", Path::new("t.rhai"), src, &args);
        assert!(text.contains("Trains a thing.\n  more\n"), "{text}");
        assert!(
            text.contains("  steps=10   how long\n  out=\"out\"\n"),
            "{text}"
        );
    }

    #[test]
    fn a_notebooks_help_names_its_command_and_leaves_out_the_cell_markers() {
        let src = "// %% [markdown]\n// A report on a thing.\n// %%\nlet s = arg(\"steps\", 10);\n";
        let args = collect_src(src).unwrap();
        let text = help("notebook", Path::new("r.rhai"), src, &args);
        assert!(text.starts_with("usage: brain notebook r.rhai "), "{text}");
        assert!(
            text.contains("A report on a thing.") && !text.contains("%%"),
            "{text}"
        );
    }
}
