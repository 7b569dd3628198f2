//! The boundary between the engine and Rhai: engine errors become Rhai runtime errors that carry
//! the position of the script's call, and a panic never crosses into the script engine.

use rhai::{
    Dynamic, EvalAltResult, FuncRegistration, Module, NativeCallContext, Position, RhaiFunc,
    RhaiNativeFunc, Variant,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

pub type RhaiResult<T> = Result<T, Box<EvalAltResult>>;

pub fn runtime_error(msg: impl Into<String>) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(
        msg.into().into(),
        Position::NONE,
    ))
}

/// Registers `f` into `module` so that an error it returns carries the position of the call.
///
/// Rhai fills in the call's position for global functions and methods, but not for functions
/// called through a namespace (`data::csv(..)`, `nn::cross_entropy(..)`): their errors would
/// reach the REPL and `brain run` without a line and column. Every binding is registered through
/// here (`help::Api` and the plot module), so every error points at its call, whatever the
/// function does; `guard` and `runtime_error` stay position-free.
pub fn set_into_module<A: 'static, const N: usize, const X: bool, R, const F: bool, FUNC>(
    registration: FuncRegistration,
    module: &mut Module,
    f: FUNC,
) where
    R: Variant + Clone,
    FUNC: RhaiNativeFunc<A, N, X, R, F> + Send + Sync + 'static,
{
    // The same purity rule as `FuncRegistration::set_into_module` for functions that are not
    // property or index setters (bindings register those on the engine, not through here).
    let positioned = with_call_position(f.into_rhai_function(true, false));
    registration.set_into_module_raw(module, FUNC::param_types(), positioned);
}

type NativeFn =
    dyn Fn(Option<NativeCallContext>, &mut [&mut Dynamic]) -> RhaiResult<Dynamic> + Send + Sync;

/// Wraps a native function so that it always receives a call context, and stamps the context's
/// position on an error that has none.
fn with_call_position(f: RhaiFunc) -> RhaiFunc {
    let wrap = |inner: Arc<NativeFn>| -> Arc<NativeFn> {
        Arc::new(
            move |ctx: Option<NativeCallContext>, args: &mut [&mut Dynamic]| {
                let pos = ctx.as_ref().map_or(Position::NONE, |c| c.call_position());
                let result = match &ctx {
                    // The call's context, for script-written modules the call may run.
                    Some(c) => crate::script_call::with_caller(c, || inner(Some(copy(c)), args)),
                    None => inner(None, args),
                };
                result.map_err(|mut e| {
                    if e.position().is_none() {
                        e.set_position(pos);
                    }
                    e
                })
            },
        )
    };
    match f {
        RhaiFunc::Pure {
            func,
            is_pure,
            is_volatile,
            ..
        } => RhaiFunc::Pure {
            func: wrap(func),
            has_context: true,
            is_pure,
            is_volatile,
        },
        RhaiFunc::Method {
            func,
            is_pure,
            is_volatile,
            ..
        } => RhaiFunc::Method {
            func: wrap(func),
            has_context: true,
            is_pure,
            is_volatile,
        },
        other => other,
    }
}

/// A second handle on a call's context (the type is not `Clone`; its parts are borrows).
fn copy<'a>(c: &'a NativeCallContext<'_>) -> NativeCallContext<'a> {
    NativeCallContext::new_with_all_fields(
        c.engine(),
        c.fn_name(),
        c.fn_source(),
        c.global_runtime_state(),
        c.call_position(),
    )
}

/// An error as a script's author reads it: Rust type paths become the names `help()` uses
/// (`Tensor`, not `rusting_brain::tensor::Tensor`), Rhai's spelling of a string parameter
/// (`&str | ImmutableString | String`) becomes `string`, and a tensor where Rhai wants a bool
/// (`if x > 0.0`) says what to write instead. Function-call wrappers are unwrapped to their
/// cause, which is what the REPL shows; the position is the outermost call's, and a
/// cancellation stays a cancellation.
pub fn in_script_terms(engine: &rhai::Engine, e: Box<EvalAltResult>) -> Box<EvalAltResult> {
    let pos = e.position();
    let mut cause = &*e;
    while let EvalAltResult::ErrorInFunctionCall(_, _, inner, _) = cause {
        cause = inner;
    }
    let message = match cause {
        EvalAltResult::ErrorTerminated(..) | EvalAltResult::ErrorRuntime(..) => return e,
        // Rhai's fields are (wanted, got); whichever way round, a tensor met a bool.
        EvalAltResult::ErrorMismatchDataType(a, b, _)
            if [engine.map_type_name(a), engine.map_type_name(b)].contains(&"Tensor")
                && [a.as_str(), b.as_str()].contains(&"bool") =>
        {
            "a tensor is not a bool; use `.item() > 0.0` (one element) or `.any()` / `.all()`"
                .to_string()
        }
        EvalAltResult::ErrorFunctionNotFound(signature, _) => {
            let text = script_type_names(engine, &format!("Function not found: {signature}"));
            let name = signature.split(" (").next().unwrap_or(signature);
            let forms = crate::help::forms_of(name);
            if !forms.is_empty() {
                format!("{text}; {name} takes: {}", forms.join(" | "))
            } else if let Some(near) = crate::help::closest_name(name) {
                format!("{text}; did you mean {near}?")
            } else {
                text
            }
        }
        other => {
            let text = other.to_string();
            let text = match text.rfind(" (line ") {
                Some(i) => text[..i].to_string(),
                None => text,
            };
            script_type_names(engine, &text)
        }
    };
    Box::new(EvalAltResult::ErrorRuntime(message.into(), pos))
}

/// `text` with every Rust type path in it (`a::b::C`) replaced by its registered script name.
fn script_type_names(engine: &rhai::Engine, text: &str) -> String {
    let text = text.replace("&str | ImmutableString | String", "string");
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find(is_path_char) {
        out.push_str(&rest[..start]);
        let word_len = rest[start..]
            .find(|c: char| !is_path_char(c))
            .unwrap_or(rest.len() - start);
        let word = &rest[start..start + word_len];
        match word.contains("::") {
            true => out.push_str(engine.map_type_name(word)),
            false => out.push_str(word),
        }
        rest = &rest[start + word_len..];
    }
    out.push_str(rest);
    out.replace("ImmutableString", "string")
}

/// Runs an engine call, mapping its error and turning a panic into an error that says it is a bug.
pub fn guard<T>(f: impl FnOnce() -> rusting_brain::Result<T>) -> RhaiResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(rusting_brain::Error::Cancelled)) => Err(Box::new(EvalAltResult::ErrorTerminated(
            "cancelled".into(),
            Position::NONE,
        ))),
        // A script error from a script-written module's forward comes back as it was raised.
        Ok(Err(e)) => {
            Err(crate::script_call::take_raised().unwrap_or_else(|| runtime_error(e.to_string())))
        }
        Err(panic) => Err(runtime_error(format!(
            "internal error (this is a bug in RustingBrain, please report it): {}",
            panic_text(&panic)
        ))),
    }
}

/// Like `guard` for calls that already speak Rhai errors (closures that call back into scripts).
pub fn guard_rhai<T>(f: impl FnOnce() -> RhaiResult<T>) -> RhaiResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => Err(runtime_error(format!(
            "internal error (this is a bug in RustingBrain, please report it): {}",
            panic_text(&panic)
        ))),
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}
