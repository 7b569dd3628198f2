//! Checks that help entries tell the truth: every example runs in a fresh engine, and every
//! signature names a registered function with as many parameters as it shows.
//!
//! Both return one line per problem, naming the entry, so a test can report them all at once.

use super::book::HelpEntry;
use super::signature::{self, Kind};
use rhai::Engine;
use std::collections::{BTreeMap, BTreeSet};

/// Runs each entry's example in an engine from `make_engine`; one line per example that fails.
pub fn run_examples(entries: &[HelpEntry], make_engine: impl Fn() -> Engine) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| {
            crate::io::without_stdin(|| make_engine().run(&e.example))
                .err()
                .map(|err| format!("{}: example `{}` fails: {err}", e.name, e.example))
        })
        .collect()
}

/// Parses each entry's signature and compares its parameter count with the functions
/// registered in `engine`: with the arity `Api` recorded for the entry, and with Rhai's
/// metadata for the name it documents. One line per disagreement.
pub fn check_signatures(entries: &[HelpEntry], engine: &Engine) -> Vec<String> {
    let registered = match registered_arities(engine) {
        Ok(r) => r,
        Err(e) => return vec![format!("cannot read the engine's metadata: {e}")],
    };
    let mut problems = Vec::new();
    for e in entries {
        let sig = match signature::parse(&e.signature) {
            Ok(s) => s,
            Err(why) => {
                problems.push(format!("{}: signature `{}`: {why}", e.name, e.signature));
                continue;
            }
        };
        let shows = match (sig.min_params, sig.max_params) {
            (1, 1) => "1 parameter".to_string(),
            (n, m) if n == m => format!("{n} parameters"),
            (n, m) => format!("{n} to {m} parameters"),
        };
        if !names_match(&e.name, &sig.name, sig.kind) {
            problems.push(format!(
                "{}: signature `{}` names `{}`",
                e.name, e.signature, sig.name
            ));
        }
        for &arity in &e.arities {
            if !sig.takes(arity) {
                problems.push(format!(
                    "{}: signature `{}` shows {shows}, the registered function takes {arity}",
                    e.name, e.signature
                ));
            }
        }
        let rhai_name = match sig.kind {
            Kind::Call | Kind::Operator => e.name.clone(),
            Kind::Property | Kind::Index => sig.rhai_name(),
        };
        let counts = registered.get(&rhai_name).cloned().unwrap_or_default();
        if !counts.iter().any(|&n| sig.takes(n)) {
            problems.push(format!(
                "{}: signature `{}` shows {shows}, but the registered `{rhai_name}` takes {counts:?}",
                e.name, e.signature
            ));
        }
    }
    problems
}

/// An entry's name against the name its signature calls: `nn::linear` with `nn::linear(...)`,
/// `save` (a method registered globally from the `text` module) with `tok.save(...)`.
fn names_match(entry: &str, signature: &str, kind: Kind) -> bool {
    match kind {
        Kind::Index => entry == "[]",
        _ => entry == signature,
    }
}

/// Parameter counts of every registered function by the name a script calls it: `matmul`,
/// `nn::linear`, `get$shape`. Functions of a static module that are in the global namespace
/// (methods such as `model.forward`) go by their bare name.
fn registered_arities(engine: &Engine) -> Result<BTreeMap<String, BTreeSet<usize>>, String> {
    let json = engine
        .gen_fn_metadata_to_json(false)
        .map_err(|e| e.to_string())?;
    let meta: serde_json::Value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    let mut out: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    collect_functions(&meta, None, &mut out);
    Ok(out)
}

fn collect_functions(
    module: &serde_json::Value,
    namespace: Option<&str>,
    out: &mut BTreeMap<String, BTreeSet<usize>>,
) {
    for f in module["functions"].as_array().into_iter().flatten() {
        let (Some(name), Some(params)) = (f["name"].as_str(), f["numParams"].as_u64()) else {
            continue;
        };
        let global = f["namespace"]
            .as_str()
            .is_some_and(|n| n.eq_ignore_ascii_case("global"));
        let key = match namespace {
            Some(ns) if !global => format!("{ns}::{name}"),
            _ => name.to_string(),
        };
        out.entry(key).or_default().insert(params as usize);
    }
    for (name, sub) in module["modules"].as_object().into_iter().flatten() {
        collect_functions(sub, Some(name), out);
    }
}
