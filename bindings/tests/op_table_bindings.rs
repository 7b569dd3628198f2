//! Every op in the engine's op table is reachable from Rhai and has a help entry.

use rusting_brain::ops::table::OPS;
use rusting_brain_rhai::help;

/// The script name of an op where it differs from the engine's.
fn script_name(op: &str) -> &str {
    match op {
        "add" => "+",
        "sub" => "-",
        "mul" => "*",
        "div" => "/",
        "to_dtype" => "to",
        // `var` is a reserved word in Rhai.
        "var" => "variance",
        other => other,
    }
}

#[test]
fn every_op_in_the_table_has_a_binding_with_help() {
    let _engine = rusting_brain_rhai::new_engine();
    let missing: Vec<&str> = OPS
        .iter()
        .map(|o| o.name)
        .filter(|n| help::lookup(script_name(n)).is_empty())
        .collect();
    assert!(
        missing.is_empty(),
        "ops without a Rhai binding and help entry: {missing:?}"
    );
}

#[test]
fn help_entries_carry_a_signature_doc_and_example() {
    let _engine = rusting_brain_rhai::new_engine();
    for name in help::names() {
        for e in help::lookup(&name) {
            assert!(
                !e.signature.is_empty() && !e.doc.is_empty() && !e.example.is_empty(),
                "{e:?}"
            );
        }
    }
}
