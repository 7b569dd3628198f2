//! Progress bars for long loops, and the process-wide cancel flag that Ctrl-C sets.
//!
//! On a terminal the bar is drawn by indicatif; otherwise (logs, pipes, notebooks) it prints
//! a plain line every 10% or every 10 seconds:
//! `train  50/100 (50%)  12.3 it/s  ETA 4s  loss 0.123`.
//!
//! In Rhai, `progress(range, label)` is iterable and a handle at once:
//!
//! ```rhai
//! for step in progress(0..1000, "train") { progress_message(`loss ${loss}`); }
//! let bar = progress(batches, "epoch 1");
//! for batch in bar { bar.set_message(`loss ${loss}`); }
//! ```
//!
//! Each iteration checks the engine's cancel flag; once set, the loop stops with the error "cancelled".

use std::io::{IsTerminal, Write};
use std::ops::{Range, RangeInclusive};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rhai::{Array, Dynamic, Engine, EvalAltResult, FuncRegistration, Position, INT};

// The cancel flag is the engine's (`rusting_brain::cancel`), so script loops, progress bars and
// long engine loops all stop on the same Ctrl-C.

/// Asks every running loop to stop (called by the Ctrl-C handler).
pub fn request_cancel() {
    rusting_brain::cancel::request();
}

/// Whether a cancel was requested and not yet taken.
pub fn is_cancelled() -> bool {
    rusting_brain::cancel::is_requested()
}

/// Clears the flag and says whether it was set; the REPL does so before each entry so an old
/// Ctrl-C does not cancel the next one. Loops leave the flag set, so enclosing loops stop too.
pub fn take_cancel() -> bool {
    rusting_brain::cancel::clear()
}

/// A plain line is printed at least this often, even between 10% steps.
const LINE_INTERVAL: Duration = Duration::from_secs(10);

/// A progress bar over `total` steps. Clones share the same bar.
#[derive(Clone)]
pub struct Progress {
    state: Arc<Mutex<State>>,
}

struct State {
    counts: Counts,
    sink: Sink,
}

/// What a status line shows.
struct Counts {
    label: String,
    total: u64,
    done: u64,
    message: String,
    started: Instant,
}

enum Sink {
    Terminal(ProgressBar),
    Lines {
        out: Box<dyn Write + Send>,
        printed_tenths: u64,
        printed_at: Instant,
        printed_done: Option<u64>,
    },
}

impl Progress {
    /// A bar on stdout: drawn by indicatif on a terminal, plain lines otherwise.
    pub fn new(total: u64, label: &str) -> Progress {
        if std::io::stdout().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stdout());
            let template = "{prefix} {wide_bar} {pos}/{len} ({percent}%) {per_sec} ETA {eta} {msg}";
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar.set_prefix(label.to_string());
            Progress::with_sink(total, label, Sink::Terminal(bar))
        } else {
            Progress::with_writer(total, label, Box::new(PrintStdout))
        }
    }

    /// A bar that prints plain lines to `out`.
    pub fn with_writer(total: u64, label: &str, out: Box<dyn Write + Send>) -> Progress {
        let sink = Sink::Lines {
            out,
            printed_tenths: 0,
            printed_at: Instant::now(),
            printed_done: None,
        };
        Progress::with_sink(total, label, sink)
    }

    fn with_sink(total: u64, label: &str, sink: Sink) -> Progress {
        let counts = Counts {
            label: label.to_string(),
            total,
            done: 0,
            message: String::new(),
            started: Instant::now(),
        };
        let state = State { counts, sink };
        Progress {
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// Starts counting again from zero (a bar iterated a second time).
    pub fn restart(&self) {
        let mut s = self.lock();
        s.counts.done = 0;
        s.counts.started = Instant::now();
        match &mut s.sink {
            Sink::Terminal(bar) => bar.reset(),
            Sink::Lines {
                printed_tenths,
                printed_at,
                printed_done,
                ..
            } => {
                (*printed_tenths, *printed_at, *printed_done) = (0, Instant::now(), None);
            }
        }
    }

    /// Shown after the counts, e.g. "loss 0.123".
    pub fn set_message(&self, text: &str) {
        let mut s = self.lock();
        s.counts.message = text.to_string();
        if let Sink::Terminal(bar) = &s.sink {
            bar.set_message(text.to_string());
        }
    }

    /// Marks `n` more steps done.
    pub fn inc(&self, n: u64) {
        let mut s = self.lock();
        let State { counts, sink } = &mut *s;
        counts.done = (counts.done + n).min(counts.total);
        match sink {
            Sink::Terminal(bar) => bar.set_position(counts.done),
            Sink::Lines {
                out,
                printed_tenths,
                printed_at,
                printed_done,
            } => {
                let tenths = counts.done * 10 / counts.total.max(1);
                if tenths > *printed_tenths || printed_at.elapsed() >= LINE_INTERVAL {
                    let _ = writeln!(out, "{}", status_line(counts));
                    (*printed_tenths, *printed_at, *printed_done) =
                        (tenths, Instant::now(), Some(counts.done));
                }
            }
        }
    }

    /// Ends the bar, leaving its last state visible (also when stopped early).
    pub fn finish(&self) {
        let mut s = self.lock();
        let State { counts, sink } = &mut *s;
        match sink {
            Sink::Terminal(bar) => bar.abandon(),
            Sink::Lines {
                out, printed_done, ..
            } => {
                if *printed_done != Some(counts.done) {
                    let _ = writeln!(out, "{}", status_line(counts));
                    *printed_done = Some(counts.done);
                }
            }
        }
    }

    /// Runs `f` with the bar cleared from the terminal, so printed text does not tear it.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        let bar = match &self.lock().sink {
            Sink::Terminal(bar) => Some(bar.clone()),
            Sink::Lines { .. } => None,
        };
        match bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `train  50/100 (50%)  12.3 it/s  ETA 4s  loss 0.123`
fn status_line(s: &Counts) -> String {
    let elapsed = s.started.elapsed().as_secs_f64();
    let rate = if elapsed > 0.0 {
        s.done as f64 / elapsed
    } else {
        0.0
    };
    let percent = s.done * 100 / s.total.max(1);
    let mut line = format!(
        "{}  {}/{} ({percent}%)  {} it/s",
        s.label,
        s.done,
        s.total,
        rate_text(rate)
    );
    if s.done >= s.total {
        line += &format!("  done in {}", duration_text(elapsed));
    } else if rate > 0.0 {
        line += &format!("  ETA {}", duration_text((s.total - s.done) as f64 / rate));
    }
    if !s.message.is_empty() {
        line += "  ";
        line += &s.message;
    }
    line
}

fn rate_text(rate: f64) -> String {
    match rate {
        r if r >= 100.0 => format!("{r:.0}"),
        r if r >= 10.0 => format!("{r:.1}"),
        r => format!("{r:.2}"),
    }
}

/// `4s`, `2m05s`, `1h02m`
fn duration_text(seconds: f64) -> String {
    let s = seconds.round() as u64;
    match s {
        0..60 if seconds < 10.0 => format!("{seconds:.1}s"),
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

/// Plain lines go through `print!` so test harnesses and the REPL see them as stdout.
struct PrintStdout;

impl Write for PrintStdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        print!("{}", String::from_utf8_lossy(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}

/// Bars being iterated now, innermost last (for `progress_message` and `print_line`).
static ACTIVE: Mutex<Vec<Progress>> = Mutex::new(Vec::new());

fn active() -> MutexGuard<'static, Vec<Progress>> {
    ACTIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Prints a line of script output above the innermost running bar (or plainly); the REPL
/// routes Rhai's `print` through this so output does not tear a terminal bar.
pub fn print_line(text: &str) {
    let innermost = active().last().cloned();
    match innermost {
        Some(bar) => bar.suspend(|| println!("{text}")),
        None => println!("{text}"),
    }
}

/// The Rhai value of `progress(...)`: iterable, and a handle for `set_message`.
#[derive(Clone)]
pub struct ScriptProgress {
    bar: Progress,
    items: Items,
}

#[derive(Clone)]
enum Items {
    Range(Range<INT>),
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
    fn new(items: Items, label: &str) -> ScriptProgress {
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
        if is_cancelled() {
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
        if let Some(i) = active
            .iter()
            .rposition(|b| Arc::ptr_eq(&b.state, &self.bar.state))
        {
            active.remove(i);
        }
    }
}

/// Registers `progress(...)`, `bar.set_message(text)` and `progress_message(text)`.
pub fn register(engine: &mut Engine) {
    for (name, signature, doc, example) in [
        ("progress", "progress(range | count | array, label) -> Progress", "Iterates with a progress bar showing rate, ETA and a message; plain lines when stdout is not a terminal. Ctrl-C stops it.", "for step in progress(0..1000, \"train\") { ... }"),
        ("progress_message", "progress_message(text)", "Sets the message of the innermost running progress bar (e.g. the loss).", "progress_message(`loss ${loss.item()}`)"),
        ("set_message", "bar.set_message(text)", "Sets this progress bar's message.", "bar.set_message(\"warming up\")"),
    ] {
        crate::help::record(crate::help::HelpEntry { name: name.into(), signature: signature.into(), doc: doc.into(), example: example.into() });
    }
    engine.register_type_with_name::<ScriptProgress>("Progress");
    engine.register_iterator_result::<ScriptProgress, Dynamic>();
    let doc = "/// Wraps a range, a count or an array in a progress bar with rate and ETA; \
               iterate it with `for`. Ctrl-C stops the loop with the error \"cancelled\".\n\
               /// Set the text after the counts with `bar.set_message(text)` or, inside the \
               loop, `progress_message(text)`.\n\
               /// Example: `for step in progress(0..1000, \"train\") { progress_message(`loss ${loss}`); }`";
    let with_label = |items: Items, label: &str| ScriptProgress::new(items, label);
    FuncRegistration::new("progress")
        .with_comments([doc])
        .register_into_engine(engine, move |r: Range<INT>, label: &str| {
            with_label(Items::Range(r), label)
        });
    FuncRegistration::new("progress")
        .with_comments([doc])
        .register_into_engine(engine, move |r: RangeInclusive<INT>, label: &str| {
            let range = *r.start()..r.end().saturating_add(1);
            with_label(Items::Range(range), label)
        });
    FuncRegistration::new("progress")
        .with_comments([doc])
        .register_into_engine(engine, move |n: INT, label: &str| {
            with_label(Items::Range(0..n), label)
        });
    FuncRegistration::new("progress")
        .with_comments([doc])
        .register_into_engine(engine, move |a: Array, label: &str| {
            with_label(Items::Array(a), label)
        });
    FuncRegistration::new("set_message")
        .with_comments(["/// Sets the text shown after the bar's counts.\n\
                         /// Example: `bar.set_message(`loss ${loss}`)`"])
        .register_into_engine(engine, |bar: &mut ScriptProgress, text: Dynamic| {
            bar.bar.set_message(&text.to_string())
        });
    FuncRegistration::new("progress_message")
        .with_comments(["/// Sets the message of the innermost running progress bar (no-op outside one).\n\
                         /// Example: `for i in progress(0..100, \"train\") { progress_message(`loss ${loss}`); }`"])
        .register_into_engine(engine, |text: Dynamic| {
            if let Some(bar) = active().last() {
                bar.set_message(&text.to_string());
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering;

    /// A writer whose bytes the test can read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn lines(&self) -> Vec<String> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines().map(String::from).collect()
        }
    }

    /// Script tests share the process-wide cancel flag and active-bar list.
    static SCRIPT_LOCK: Mutex<()> = Mutex::new(());

    #[test]
    fn plain_lines_come_every_tenth_with_rate_eta_and_message() {
        let out = Captured::default();
        let bar = Progress::with_writer(100, "train", Box::new(out.clone()));
        bar.set_message("loss 0.123");
        for _ in 0..100 {
            bar.inc(1);
        }
        bar.finish();
        let lines = out.lines();
        assert_eq!(
            lines.len(),
            10,
            "one line per 10%, none repeated by finish: {lines:?}"
        );
        let half = &lines[4];
        assert!(half.starts_with("train  50/100 (50%)  "), "{half}");
        assert!(
            half.contains(" it/s  ETA ") && half.ends_with("  loss 0.123"),
            "{half}"
        );
        let last = &lines[9];
        assert!(
            last.starts_with("train  100/100 (100%)  ") && last.contains("  done in "),
            "{last}"
        );
    }

    #[test]
    fn a_bar_stopped_early_prints_where_it_stopped() {
        let out = Captured::default();
        let bar = Progress::with_writer(1000, "eval", Box::new(out.clone()));
        for _ in 0..3 {
            bar.inc(1);
        }
        bar.finish();
        let lines = out.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("eval  3/1000 (0%)  "), "{}", lines[0]);
    }

    #[test]
    fn durations_are_short() {
        let cases = [
            (4.24, "4.2s"),
            (42.0, "42s"),
            (65.0, "1m05s"),
            (3720.0, "1h02m"),
        ];
        for (seconds, text) in cases {
            assert_eq!(duration_text(seconds), text);
        }
    }

    fn engine_counting_ticks(ticks: &'static AtomicUsize, cancel_at: usize) -> Engine {
        let mut engine = Engine::new();
        register(&mut engine);
        engine.register_fn("tick", move || {
            if ticks.fetch_add(1, Ordering::SeqCst) + 1 == cancel_at {
                request_cancel();
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
        assert!(take_cancel(), "the flag stays set for enclosing loops");
        assert!(!is_cancelled());
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
