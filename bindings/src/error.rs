//! The boundary between the engine and Rhai: engine errors become Rhai runtime errors (Rhai adds
//! the script position), and a panic never crosses into the script engine.

use rhai::{EvalAltResult, Position};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub type RhaiResult<T> = Result<T, Box<EvalAltResult>>;

pub fn runtime_error(msg: impl Into<String>) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(
        msg.into().into(),
        Position::NONE,
    ))
}

/// Runs an engine call, mapping its error and turning a panic into an error that says it is a bug.
pub fn guard<T>(f: impl FnOnce() -> rusting_brain::Result<T>) -> RhaiResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(rusting_brain::Error::Cancelled)) => Err(Box::new(EvalAltResult::ErrorTerminated(
            "cancelled".into(),
            Position::NONE,
        ))),
        Ok(Err(e)) => Err(runtime_error(e.to_string())),
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
