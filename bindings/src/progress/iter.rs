//! The Rhai value of `progress(...)`: a [`ScriptProgress`] that a `for` loop iterates, and the
//! list of bars being iterated now (for `progress_message` and [`print_line`]).

use std::sync::{Mutex, MutexGuard};

use rhai::{Array, Dynamic, EvalAltResult, Position, INT};

use super::bar::Progress;

/// Bars being iterated now, innermost last (for `progress_message` and `print_line`).
static ACTIVE: Mutex<Vec<Progress>> = Mutex::new(Vec::new());

fn active() -> MutexGuard<'static, Vec<Progress>> {
    ACTIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The innermost bar being iterated, if any.
pub(super) fn innermost() -> Option<Progress> {
    active().last().cloned()
}

/// Prints a line of script output above the innermost running bar (or plainly); the REPL
/// routes Rhai's `print` through this so output does not tear a terminal bar.
pub fn print_line(text: &str) {
    match innermost() {
        Some(bar) => bar.suspend(|| println!("{text}")),
        None => println!("{text}"),
    }
}

/// The Rhai value of `progress(...)`: iterable, and a handle for `set_message`.
#[derive(Clone)]
pub struct ScriptProgress {
    pub(super) bar: Progress,
    items: Items,
}

#[derive(Clone)]
pub(super) enum Items {
    Range(std::ops::Range<INT>),
    Array(Array),
}

impl Items {
    fn len(&self) -> u64 {
        match self {
            Items::Range(r) => r.end.saturating_sub(r.start).max(0) as u64,
            Items::Array(a) => a.len() as u64,
        }
    }

    fn get(&self, index: u64) -> Dynamic {
        match self {
            Items::Range(r) => Dynamic::from_int(r.start + index as INT),
            Items::Array(a) => a[index as usize].clone(),
        }
    }
}

impl ScriptProgress {
    pub(super) fn new(items: Items, label: &str) -> ScriptProgress {
        ScriptProgress {
            bar: Progress::new(items.len(), label),
            items,
        }
    }
}

impl IntoIterator for ScriptProgress {
    type Item = Result<Dynamic, Box<EvalAltResult>>;
    type IntoIter = ProgressIter;

    fn into_iter(self) -> ProgressIter {
        self.bar.restart();
        active().push(self.bar.clone());
        ProgressIter {
            bar: self.bar,
            items: self.items,
            next: 0,
            stopped: false,
        }
    }
}

/// One pass of a `for` loop over a [`ScriptProgress`].
pub struct ProgressIter {
    bar: Progress,
    items: Items,
    next: u64,
    stopped: bool,
}

impl Iterator for ProgressIter {
    type Item = Result<Dynamic, Box<EvalAltResult>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.stopped {
            return None;
        }
        // Asking for the next item means the previous one's loop body finished.
        if self.next > 0 {
            self.bar.inc(1);
        }
        if rusting_brain::cancel::is_requested() {
            self.stopped = true;
            let error = EvalAltResult::ErrorRuntime("cancelled".into(), Position::NONE);
            return Some(Err(error.into()));
        }
        if self.next >= self.items.len() {
            self.stopped = true;
            return None;
        }
        self.next += 1;
        Some(Ok(self.items.get(self.next - 1)))
    }
}

impl Drop for ProgressIter {
    // Runs on normal end, `break`, errors and cancellation alike.
    fn drop(&mut self) {
        self.bar.finish();
        let mut active = active();
        if let Some(i) = active.iter().rposition(|b| b.is_same_bar(&self.bar)) {
            active.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::captured::Captured;
    use super::super::register;
    use super::*;
    use rhai::Engine;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering;

    /// Script tests share the process-wide cancel flag and active-bar list.
    static SCRIPT_LOCK: Mutex<()> = Mutex::new(());

    fn engine_counting_ticks(ticks: &'static AtomicUsize, cancel_at: usize) -> Engine {
        let mut engine = Engine::new();
        register(&mut engine);
        engine.register_fn("tick", move || {
            if ticks.fetch_add(1, Ordering::SeqCst) + 1 == cancel_at {
                rusting_brain::cancel::request();
            }
        });
        engine
    }

    #[test]
    fn cancel_stops_a_script_loop_with_the_cancelled_error() {
        let _serial = SCRIPT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        static TICKS: AtomicUsize = AtomicUsize::new(0);
        let engine = engine_counting_ticks(&TICKS, 5);
        let err = engine
            .run(r#"for i in progress(0..100, "train") { tick(); }"#)
            .unwrap_err();
        assert!(err.to_string().contains("cancelled"), "{err}");
        assert_eq!(
            TICKS.load(Ordering::SeqCst),
            5,
            "the loop ran on after the cancel"
        );
        assert!(
            rusting_brain::cancel::clear(),
            "the flag stays set for enclosing loops"
        );
        assert!(!rusting_brain::cancel::is_requested());
        assert!(active().is_empty(), "the cancelled bar is still active");
    }

    #[test]
    fn script_loops_over_ranges_counts_and_arrays() {
        let _serial = SCRIPT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut engine = Engine::new();
        register(&mut engine);
        let script = r#"
            let s = 0;
            for i in progress(0..10, "range") { s += i; progress_message(`i ${i}`); }
            for i in progress(1..=3, "inclusive") { s += i; }
            for x in progress([10, 20], "array") { s += x; }
            let bar = progress(4, "count");
            for i in bar { bar.set_message(`i ${i}`); s += i; }
            for i in progress(0..100, "break") { if i == 2 { break; } }
            s
        "#;
        assert_eq!(engine.eval::<INT>(script).unwrap(), 45 + 6 + 30 + 6);
        assert!(
            active().is_empty(),
            "a finished or broken loop leaves its bar active"
        );
    }

    #[test]
    fn progress_message_sets_the_innermost_running_bar() {
        let _serial = SCRIPT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let out = Captured::default();
        let bar = Progress::with_writer(10, "outer", Box::new(out.clone()));
        let items = Items::Range(0..10);
        let mut engine = Engine::new();
        register(&mut engine);
        let mut scope = rhai::Scope::new();
        scope.push("bar", ScriptProgress { bar, items });
        engine
            .run_with_scope(
                &mut scope,
                r#"for i in bar { progress_message(`step ${i}`); }"#,
            )
            .unwrap();
        let lines = out.lines();
        assert!(lines.last().unwrap().ends_with("  step 9"), "{lines:?}");
    }
}
