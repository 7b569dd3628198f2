//! The help book: every entry by name, and its rendering for `help()` and `help("name")`.

use std::collections::BTreeMap;
use std::sync::RwLock;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelpEntry {
    /// Qualified name as a script writes it: `matmul`, `nn::linear`.
    pub name: String,
    /// `a.matmul(b) -> Tensor`
    pub signature: String,
    pub doc: String,
    /// A script that runs on its own in a fresh engine (`help::check` runs each one).
    pub example: String,
    /// The parameter counts (a method's receiver included) of the registered overloads this
    /// entry documents; empty for an entry recorded by hand, which `help::check` matches
    /// against Rhai's metadata instead.
    pub arities: Vec<usize>,
    /// For a method registered through `Api`, the Rust type names of the receivers of the
    /// overloads it documents (`rusting_brain::tensor::Tensor`), as `Dynamic::type_name` names
    /// a value of that type; empty when not recorded (see `receivers`).
    pub receiver_types: Vec<String>,
}

impl HelpEntry {
    fn same_text(&self, other: &HelpEntry) -> bool {
        (&self.name, &self.signature, &self.doc, &self.example)
            == (&other.name, &other.signature, &other.doc, &other.example)
    }
}

static BOOK: RwLock<BTreeMap<String, Vec<HelpEntry>>> = RwLock::new(BTreeMap::new());

pub fn record(entry: HelpEntry) {
    let mut book = BOOK.write().unwrap_or_else(|e| e.into_inner());
    let list = book.entry(entry.name.clone()).or_default();
    // One entry may document several overloads (`nn::mse_loss(pred, target[, #{ .. }])`).
    match list.iter_mut().find(|e| e.same_text(&entry)) {
        Some(known) => {
            for arity in entry.arities {
                if !known.arities.contains(&arity) {
                    known.arities.push(arity);
                }
            }
            for ty in entry.receiver_types {
                if !known.receiver_types.contains(&ty) {
                    known.receiver_types.push(ty);
                }
            }
        }
        None => list.push(entry),
    }
}

/// Records the help of a function registered without [`Api`](super::Api) (an iterator, a
/// function with named parameters); `help::check` finds its arity in Rhai's metadata.
pub fn record_entry(name: &str, signature: &str, doc: &str, example: &str) {
    record(HelpEntry {
        name: name.into(),
        signature: signature.into(),
        doc: doc.into(),
        example: example.into(),
        arities: Vec::new(),
        receiver_types: Vec::new(),
    });
}

/// Records the help of a property getter (`t.shape`), which Rhai registers as `get$shape`.
pub fn getter(name: &str, signature: &str, doc: &str, example: &str) {
    record(HelpEntry {
        name: name.into(),
        signature: signature.into(),
        doc: doc.into(),
        example: example.into(),
        arities: vec![1],
        receiver_types: Vec::new(),
    });
}

/// Every entry for `name` (each overload), searching unqualified names too.
pub fn lookup(name: &str) -> Vec<HelpEntry> {
    let book = BOOK.read().unwrap_or_else(|e| e.into_inner());
    if let Some(v) = book.get(name) {
        return v.clone();
    }
    book.iter()
        .filter(|(k, _)| k.rsplit("::").next() == Some(name))
        .flat_map(|(_, v)| v.clone())
        .collect()
}

/// Every entry, by name and then in the order recorded.
pub fn entries() -> Vec<HelpEntry> {
    let book = BOOK.read().unwrap_or_else(|e| e.into_inner());
    book.values().flatten().cloned().collect()
}

/// All registered names, for completion and listings.
pub fn names() -> Vec<String> {
    BOOK.read()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .cloned()
        .collect()
}

/// Every function of a namespace (`nn::` or `nn`), one line each: signature and doc.
fn namespace_listing(name: &str) -> Option<String> {
    let prefix = format!("{}::", name.trim_end_matches("::"));
    let lines: Vec<String> = entries()
        .into_iter()
        .filter(|e| e.name.starts_with(&prefix))
        .map(|e| format!("{} — {}", e.signature, e.doc))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

pub fn render(name: &str) -> String {
    if name.ends_with("::") || (!name.contains("::") && lookup(name).is_empty()) {
        if let Some(listing) = namespace_listing(name) {
            return listing;
        }
    }
    let entries = lookup(name);
    if entries.is_empty() {
        let close: Vec<String> = names()
            .into_iter()
            .filter(|n| n.contains(name))
            .take(8)
            .collect();
        return if close.is_empty() {
            format!("no help for `{name}`")
        } else {
            format!("no help for `{name}`; related: {}", close.join(", "))
        };
    }
    entries
        .iter()
        .map(|e| format!("{}\n    {}\n    example: {}", e.signature, e.doc, e.example))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The overview that `help()` prints.
pub fn overview() -> String {
    let names = names();
    let namespaces: std::collections::BTreeSet<&str> = names
        .iter()
        .filter_map(|n| n.split_once("::").map(|(ns, _)| ns))
        .collect();
    let globals: Vec<&str> = names
        .iter()
        .filter(|n| !n.contains("::") && n.chars().next().is_some_and(|c| c.is_alphabetic()))
        .map(|s| s.as_str())
        .collect();
    format!(
        "RustingBrain: tensors, autograd and training from Rhai.\n\nnamespaces: {}\nfunctions and methods: {}\n\nhelp(\"name\") shows one function, e.g. help(\"matmul\") or help(\"nn::linear\"); help(\"nn::\") lists a namespace.",
        namespaces.iter().map(|n| format!("{n}::")).collect::<Vec<_>>().join(" "),
        globals.join(", ")
    )
}
