//! Help text for every registered function: one-line doc with its signature and an example.
//! Functions are registered through `Api`, which records the entry as it registers the function
//! with Rhai's metadata, so `help("name")` and the REPL's completion read one source.

use rhai::{FuncRegistration, Module, RhaiNativeFunc, Variant};
use std::collections::BTreeMap;
use std::sync::RwLock;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelpEntry {
    /// Qualified name as a script writes it: `matmul`, `nn::linear`.
    pub name: String,
    /// `a.matmul(b) -> Tensor`
    pub signature: String,
    pub doc: String,
    pub example: String,
}

static BOOK: RwLock<BTreeMap<String, Vec<HelpEntry>>> = RwLock::new(BTreeMap::new());

pub fn record(entry: HelpEntry) {
    let mut book = BOOK.write().unwrap_or_else(|e| e.into_inner());
    let list = book.entry(entry.name.clone()).or_default();
    if !list.contains(&entry) {
        list.push(entry);
    }
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

/// All registered names, for completion and listings.
pub fn names() -> Vec<String> {
    BOOK.read()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .cloned()
        .collect()
}

pub fn render(name: &str) -> String {
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
        "RustingBrain: tensors, autograd and training from Rhai.\n\nnamespaces: {}\nfunctions and methods: {}\n\nhelp(\"name\") shows one function, e.g. help(\"matmul\") or help(\"nn::linear\").",
        namespaces.iter().map(|n| format!("{n}::")).collect::<Vec<_>>().join(" "),
        globals.join(", ")
    )
}

/// Registers functions into a module and records their help.
pub struct Api<'a> {
    pub module: &'a mut Module,
    /// The namespace the module is mounted at, if any (`nn`).
    pub namespace: Option<&'static str>,
}

impl<'a> Api<'a> {
    pub fn new(module: &'a mut Module, namespace: Option<&'static str>) -> Self {
        Api { module, namespace }
    }

    /// `signature` is how a script calls it (`t.matmul(other) -> Tensor`), `doc` one line.
    pub fn func<
        A: 'static,
        const N: usize,
        const X: bool,
        R: Variant + Clone,
        const F: bool,
        FUNC,
    >(
        &mut self,
        name: &str,
        signature: &str,
        doc: &str,
        example: &str,
        f: FUNC,
    ) where
        FUNC: RhaiNativeFunc<A, N, X, R, F> + Send + Sync + 'static,
    {
        self.register(name, signature, doc, example, self.namespace.is_none(), f)
    }

    /// A method on a namespace's type (`model.forward(x)`): callable without the namespace.
    pub fn method<
        A: 'static,
        const N: usize,
        const X: bool,
        R: Variant + Clone,
        const F: bool,
        FUNC,
    >(
        &mut self,
        name: &str,
        signature: &str,
        doc: &str,
        example: &str,
        f: FUNC,
    ) where
        FUNC: RhaiNativeFunc<A, N, X, R, F> + Send + Sync + 'static,
    {
        self.register(name, signature, doc, example, true, f)
    }

    fn register<
        A: 'static,
        const N: usize,
        const X: bool,
        R: Variant + Clone,
        const F: bool,
        FUNC,
    >(
        &mut self,
        name: &str,
        signature: &str,
        doc: &str,
        example: &str,
        global: bool,
        f: FUNC,
    ) where
        FUNC: RhaiNativeFunc<A, N, X, R, F> + Send + Sync + 'static,
    {
        let qualified = match self.namespace {
            Some(ns) if !global => format!("{ns}::{name}"),
            _ => name.to_string(),
        };
        let comments = [format!("/// {doc}"), format!("/// Example: `{example}`")];
        let mut reg = FuncRegistration::new(name).with_comments(comments);
        if global {
            reg = reg.in_global_namespace();
        }
        reg.set_into_module(self.module, f);
        record(HelpEntry {
            name: qualified,
            signature: signature.to_string(),
            doc: doc.to_string(),
            example: example.to_string(),
        });
    }
}
