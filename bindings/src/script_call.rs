//! Calling back into the script from below the bindings.
//!
//! A module written in the script (`nn::module`) is an engine `Module` whose forward is a Rhai
//! closure. The engine calls that forward from anywhere a module runs (inside a
//! `nn::sequential`, from an optimizer's step, from an export), with no Rhai in sight; calling a
//! closure needs the calling script's context (its engine and the functions the closure was
//! compiled into). Every binding call records its context here for its duration
//! (`error::set_into_module` wraps them all), so the innermost script call is always at hand.
//!
//! An error raised inside the closure travels up through the engine as an engine error; the
//! original Rhai error (its kind, message and position in the script) is kept beside it and is
//! what the binding that started the call reports (`error::guard`).

use rhai::{EvalAltResult, NativeCallContext};
use std::cell::{Cell, RefCell};
use std::ptr::NonNull;

thread_local! {
    /// The context of the binding call running on this thread, while it runs.
    static CALLER: Cell<Option<NonNull<NativeCallContext<'static>>>> = const { Cell::new(None) };
    /// A script error on its way up through engine code.
    static PENDING: RefCell<Option<Box<EvalAltResult>>> = const { RefCell::new(None) };
}

/// Puts the previous context back when a call ends, however it ends.
struct Restore(Option<NonNull<NativeCallContext<'static>>>);

impl Drop for Restore {
    fn drop(&mut self) {
        CALLER.with(|c| c.set(self.0));
    }
}

/// Runs `f` with `ctx` as the context script-written modules call their closures in. A new call
/// starts with no script error pending: one a caller swallowed must not surface later.
pub fn with_caller<R>(ctx: &NativeCallContext, f: impl FnOnce() -> R) -> R {
    let ptr = NonNull::from(ctx).cast::<NativeCallContext<'static>>();
    let _restore = Restore(CALLER.with(|c| c.replace(Some(ptr))));
    PENDING.with(|p| p.borrow_mut().take());
    f()
}

/// Runs `f` in the context of the binding call now running on this thread; `None` outside one
/// (engine code running on its own, or on another thread).
pub fn in_caller<R>(f: impl FnOnce(&NativeCallContext) -> R) -> Option<R> {
    let ptr = CALLER.with(|c| c.get())?;
    // SAFETY: `with_caller` stores the pointer only for the span of its `f`, on this thread, and
    // the context it points to outlives that span; `Restore` takes it out again when the span
    // ends. `f` receives a borrow that cannot leave this call (its lifetime is the call's).
    Some(f(unsafe { ptr.as_ref() }))
}

/// Keeps a script error raised under engine code, returning the engine error that carries it up.
pub fn raise(what: &'static str, error: Box<EvalAltResult>) -> rusting_brain::Error {
    let message = error.to_string();
    PENDING.with(|p| *p.borrow_mut() = Some(error));
    rusting_brain::Error::InvalidArgument {
        op: what,
        msg: message,
    }
}

/// The script error an engine error carried up, if one did.
pub fn take_raised() -> Option<Box<EvalAltResult>> {
    PENDING.with(|p| p.borrow_mut().take())
}
