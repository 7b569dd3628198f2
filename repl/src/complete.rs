//! Tab completion for the REPL: functions, methods, namespaces, variables and `:commands`.

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
    /// Variable names in the session's scope, refreshed after each entry.
    pub variables: Arc<Mutex<Vec<String>>>,
}

fn word_start(line: &str, pos: usize) -> usize {
    line[..pos]
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .map(|i| i + 1)
        .unwrap_or(0)
}

/// Candidates for the word ending at `pos`.
pub fn candidates(line: &str, pos: usize, variables: &[String]) -> (usize, Vec<String>) {
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
    let names = rusting_brain_rhai::help::names();
    let mut out: Vec<String> = names
        .into_iter()
        .filter(|n| n.chars().next().is_some_and(|c| c.is_alphabetic()))
        .filter(|n| if after_dot { !n.contains("::") } else { true })
        .filter(|n| n.starts_with(word))
        .collect();
    if !after_dot {
        out.extend(variables.iter().filter(|v| v.starts_with(word)).cloned());
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

    #[test]
    fn completion_offers_functions_variables_namespaces_methods_and_commands() {
        let _engine = rusting_brain_rhai::new_engine();
        let vars = vec!["model".to_string(), "mask".to_string()];
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
}
