//! Tab completion for the REPL: functions, methods, namespaces, variables and `:commands`,
//! listed (rustyline's list mode) rather than cycled. After `x.`, when `x` is a variable of a
//! known type, only that type's methods and properties are offered (`x.res` on a tensor gives
//! `reshape`, not a checkpoint's `restore`).

use crate::session::Variable;
use rusting_brain_rhai::help::receivers::{methods_for, ValueType};
use rustyline::completion::{Completer, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Helper};
use std::sync::{Arc, Mutex};

pub const COMMANDS: &[&str] = &[
    ":help", ":load", ":time", ":vars", ":reset", ":save", ":quit",
];

pub struct BrainHelper {
    /// The variables in the session's scope and their types, refreshed after each entry.
    pub variables: Arc<Mutex<Vec<Variable>>>,
}

fn word_start(line: &str, pos: usize) -> usize {
    line[..pos]
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .map(|i| i + 1)
        .unwrap_or(0)
}

/// The variable a method is called on: the identifier right before the `.` that ends
/// `before`, unless it is itself a property (`a.b.`) or a namespace (`nn::x.`).
fn receiver<'a>(before: &str, variables: &'a [Variable]) -> Option<&'a Variable> {
    let head = before.strip_suffix('.')?;
    let start = head
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    if head[..start].ends_with(['.', ':']) {
        return None;
    }
    let name = &head[start..];
    variables.iter().rev().find(|v| v.name == name)
}

/// The methods and properties offered after `x.`: those of `x`'s type when it is a registered
/// one, else every method.
fn method_names(before: &str, variables: &[Variable]) -> Vec<String> {
    if let Some(v) = receiver(before, variables) {
        if v.rust_type != v.script_type {
            return methods_for(&ValueType {
                rust: &v.rust_type,
                script: &v.script_type,
            });
        }
    }
    rusting_brain_rhai::help::names()
        .into_iter()
        .filter(|n| !n.contains("::"))
        .collect()
}

/// Candidates for the word ending at `pos`.
pub fn candidates(line: &str, pos: usize, variables: &[Variable]) -> (usize, Vec<String>) {
    let start = word_start(line, pos);
    let word = &line[start..pos];
    if start == 0 && word.starts_with(':') {
        return (
            0,
            COMMANDS
                .iter()
                .filter(|c| c.starts_with(word))
                .map(|c| c.to_string())
                .collect(),
        );
    }
    let after_dot = line[..start].ends_with('.');
    let names = if after_dot {
        method_names(&line[..start], variables)
    } else {
        rusting_brain_rhai::help::names()
    };
    let mut out: Vec<String> = names
        .into_iter()
        .filter(|n| n.chars().next().is_some_and(|c| c.is_alphabetic()))
        .filter(|n| n.starts_with(word))
        .collect();
    if !after_dot {
        out.extend(
            variables
                .iter()
                .filter(|v| v.name.starts_with(word))
                .map(|v| v.name.clone()),
        );
        // Offer `nn::` for a namespace prefix.
        let namespaces: std::collections::BTreeSet<String> = out
            .iter()
            .filter_map(|n| n.split_once("::").map(|(ns, _)| format!("{ns}::")))
            .collect();
        if !word.contains("::") {
            out.retain(|n| !n.contains("::"));
            out.extend(namespaces);
        }
    }
    out.sort();
    out.dedup();
    (start, out)
}

impl Completer for BrainHelper {
    type Candidate = Pair;
    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let vars = self
            .variables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (start, list) = candidates(line, pos, &vars);
        Ok((
            start,
            list.into_iter()
                .map(|c| Pair {
                    display: c.clone(),
                    replacement: c,
                })
                .collect(),
        ))
    }
}

impl Hinter for BrainHelper {
    type Hint = String;
}
impl Highlighter for BrainHelper {}
impl Validator for BrainHelper {}
impl Helper for BrainHelper {}

#[cfg(test)]
mod tests {
    use super::candidates;
    use crate::session::{Session, Variable};

    fn untyped(name: &str) -> Variable {
        Variable {
            name: name.into(),
            rust_type: "i64".into(),
            script_type: "i64".into(),
        }
    }

    #[test]
    fn completion_offers_functions_variables_namespaces_methods_and_commands() {
        let _engine = rusting_brain_rhai::new_engine();
        let vars = vec![untyped("model"), untyped("mask")];
        let (start, c) = candidates("let y = ma", 10, &vars);
        assert_eq!(start, 8);
        assert!(
            c.contains(&"matmul".to_string())
                && c.contains(&"masked_fill".to_string())
                && c.contains(&"mask".to_string()),
            "{c:?}"
        );
        let (_, c) = candidates("n", 1, &vars);
        assert!(c.contains(&"nn::".to_string()), "{c:?}");
        let (_, c) = candidates("nn::cr", 6, &vars);
        assert_eq!(c, vec!["nn::cross_entropy".to_string()]);
        let (_, c) = candidates("x.resha", 7, &vars);
        assert_eq!(c, vec!["reshape".to_string()]);
        let (_, c) = candidates(":sa", 3, &vars);
        assert_eq!(c, vec![":save".to_string()]);
    }

    /// The variables of a session that ran `src`, as the REPL hands them to the completer.
    fn variables_after(src: &str) -> Vec<Variable> {
        let mut s = Session::new(rusting_brain_rhai::new_engine());
        if s.eval_complete(src).is_err() {
            panic!("{src} failed");
        }
        s.variable_types()
    }

    #[test]
    fn after_a_typed_variable_only_its_type_s_methods_are_offered() {
        let vars = variables_after(
            "let x = ones([2, 3]); let ds = data::spirals(4, #{}); let m = nn::linear(2, 2);",
        );
        let complete = |line: &str| candidates(line, line.len(), &vars).1;
        // A tensor's `res` is reshape; a checkpoint's restore is not offered.
        assert_eq!(complete("x.res"), ["reshape"]);
        let all = complete("x.");
        assert!(all.contains(&"shape".to_string()), "getters too: {all:?}");
        assert!(!all.contains(&"forward".to_string()), "{all:?}");
        let ds = complete("ds.");
        for m in ["len", "loader", "num_classes", "split", "to_string"] {
            assert!(ds.contains(&m.to_string()), "{m} missing from {ds:?}");
        }
        assert!(!ds.contains(&"reshape".to_string()), "{ds:?}");
        let model = complete("m.");
        assert!(model.contains(&"forward".to_string()), "{model:?}");
        assert!(model.contains(&"eval_mode".to_string()), "{model:?}");
        assert!(
            !model.contains(&"generate".to_string()),
            "an LM's: {model:?}"
        );
        // An unknown receiver still gets every method.
        assert!(complete("y.res").contains(&"restore".to_string()));
    }
}
