//! Which methods and properties apply to a value, for completion after `x.`: the REPL knows the
//! value in `x`, the help book knows each method's receiver.
//!
//! Methods registered through `Api` record their receiver's Rust type (`HelpEntry::
//! receiver_types`), which is matched exactly. Entries recorded by hand (property getters such
//! as `t.shape`) only have the word their signature uses for the receiver; [`RECEIVER_WORDS`]
//! maps script type names to those words, in this one place.

use super::book::{entries, HelpEntry};
use super::signature;

/// The receiver words signatures use for each script type (`t.shape`, `ds.num_features`).
pub const RECEIVER_WORDS: &[(&str, &[&str])] = &[
    ("Tensor", &["t", "a", "x"]),
    ("Model", &["model"]),
    ("LanguageModel", &["model"]),
    ("Yolo", &["model"]),
    ("Dataset", &["ds"]),
    ("YoloDataset", &["ds"]),
    ("Loader", &["loader"]),
    ("Batch", &["batch"]),
    ("Tokenizer", &["tok"]),
    ("ChatTemplate", &["template"]),
    ("TokenFile", &["tokens"]),
    ("TokenSpan", &["tokens", "span"]),
    ("Checkpoint", &["ck"]),
    ("Optimizer", &["opt"]),
    ("Standardizer", &["scaler"]),
    ("Progress", &["bar"]),
];

/// The type of a value as the completer sees it.
pub struct ValueType<'a> {
    /// `Dynamic::type_name()`: the Rust path for registered types.
    pub rust: &'a str,
    /// The name scripts use (`Engine::map_type_name`): `Tensor`, `Model`.
    pub script: &'a str,
}

fn applies(entry: &HelpEntry, ty: &ValueType) -> bool {
    if !entry.receiver_types.is_empty() {
        return entry.receiver_types.iter().any(|t| t == ty.rust);
    }
    let Ok(sig) = signature::parse(&entry.signature) else {
        return false;
    };
    let words = RECEIVER_WORDS
        .iter()
        .find(|(name, _)| *name == ty.script)
        .map_or(&[][..], |(_, words)| *words);
    sig.receiver.is_some_and(|r| words.contains(&r.as_str()))
}

/// The names of the methods and properties that apply to a value of type `ty`, sorted.
pub fn methods_for(ty: &ValueType) -> Vec<String> {
    let mut names: Vec<String> = entries()
        .into_iter()
        .filter(|e| !e.name.contains("::") && applies(e, ty))
        .map(|e| e.name)
        .collect();
    names.sort();
    names.dedup();
    names
}
