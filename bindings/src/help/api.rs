//! [`Api`]: registers functions into a Rhai module and records their help.

use super::book::{record, HelpEntry};
use rhai::{FuncRegistration, Module, RhaiNativeFunc, Variant};

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
        crate::error::set_into_module(reg, self.module, f);
        // A method's receiver type, for completion after `x.` (see `receivers`).
        let is_method = super::signature::parse(signature).is_ok_and(|s| s.receiver.is_some());
        let receiver_types = FUNC::param_names()
            .first()
            .filter(|_| is_method)
            .map(|t| {
                t.trim_start_matches("&mut ")
                    .trim_start_matches('&')
                    .to_string()
            })
            .into_iter()
            .collect();
        record(HelpEntry {
            name: qualified,
            signature: signature.to_string(),
            doc: doc.to_string(),
            example: example.to_string(),
            // N counts the parameters as Rhai does (a method's receiver first), without the
            // NativeCallContext.
            arities: vec![N],
            receiver_types,
        });
    }
}
