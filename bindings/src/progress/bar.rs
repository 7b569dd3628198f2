//! A progress bar over a number of steps: drawn by indicatif on a terminal, handed to the host's
//! live view where one is set (a notebook's updating output), plain status lines
//! (`train  50/100 (50%)  12.3 it/s  ETA 4s  loss 0.123`) everywhere else.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Plain lines (a log, a pipe) come this often while a bar runs, and once when it ends, as
/// tqdm's and ultralytics' logs do: short epochs make one line each, not one per tenth.
const LINE_INTERVAL: Duration = Duration::from_secs(15);

/// A live view redraws in place, so it may take updates often; a few a second reads smoothly
/// and costs nothing beside a training step.
const LIVE_INTERVAL: Duration = Duration::from_millis(250);

/// One state of a bar for a live view: the view shows `line` (and may draw `done`/`total` as a
/// bar), replacing what it showed for the same `id`.
pub struct LiveUpdate<'a> {
    pub id: u64,
    /// The first update of this bar: the view adds an output; later ones replace it.
    pub first: bool,
    pub done: u64,
    pub total: u64,
    pub line: &'a str,
}

/// Where bars go when the host shows them itself (the Jupyter kernel's updating outputs).
pub type LiveView = std::sync::Arc<dyn Fn(&LiveUpdate) + Send + Sync>;

static LIVE_VIEW: Mutex<Option<LiveView>> = Mutex::new(None);
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Sends the bars made from now on to `view` (None: back to the terminal or plain lines).
pub fn set_live_view(view: Option<LiveView>) {
    *LIVE_VIEW.lock().unwrap_or_else(|e| e.into_inner()) = view;
}

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
        printed_at: Instant,
        printed_done: Option<u64>,
    },
    Live {
        view: LiveView,
        id: u64,
        /// When the view last got an update (None: never).
        sent_at: Option<Instant>,
    },
}

impl Progress {
    /// A bar on stdout: the host's live view when one is set, drawn by indicatif on a terminal,
    /// plain lines otherwise. Under `brain launch` only rank 0 shows it, so the ranks' bars do
    /// not interleave.
    pub fn new(total: u64, label: &str) -> Progress {
        let main = rusting_brain::dist::current().map_or(true, |d| d.is_main());
        let live = LIVE_VIEW.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if !main {
            Progress::with_writer(total, label, Box::new(std::io::sink()))
        } else if let Some(view) = live {
            Progress::with_live_view(total, label, view)
        } else if std::io::stdout().is_terminal() {
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
            printed_at: Instant::now(),
            printed_done: None,
        };
        Progress::with_sink(total, label, sink)
    }

    /// A bar shown by `view`.
    pub fn with_live_view(total: u64, label: &str, view: LiveView) -> Progress {
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sink = Sink::Live {
            view,
            id,
            sent_at: None,
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
                printed_at,
                printed_done,
                ..
            } => {
                (*printed_at, *printed_done) = (Instant::now(), None);
            }
            Sink::Live { sent_at, .. } => *sent_at = None,
        }
    }

    /// Shown after the counts, e.g. "loss 0.123"; long decimals keep 4 significant digits.
    pub fn set_message(&self, text: &str) {
        let text = super::short_numbers::shorten(text);
        let mut s = self.lock();
        if let Sink::Terminal(bar) = &s.sink {
            bar.set_message(text.clone());
        }
        s.counts.message = text;
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
                printed_at,
                printed_done,
            } => {
                if printed_at.elapsed() >= LINE_INTERVAL {
                    let _ = writeln!(out, "{}", status_line(counts));
                    (*printed_at, *printed_done) = (Instant::now(), Some(counts.done));
                }
            }
            Sink::Live { sent_at, .. } => {
                if sent_at.is_none_or(|t| t.elapsed() >= LIVE_INTERVAL) {
                    show_live(counts, sink);
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
            Sink::Live { .. } => show_live(counts, sink),
        }
    }

    /// Runs `f` with the bar cleared from the terminal, so printed text does not tear it.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        let bar = match &self.lock().sink {
            Sink::Terminal(bar) => Some(bar.clone()),
            Sink::Lines { .. } | Sink::Live { .. } => None,
        };
        match bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// Whether `other` is a clone of this bar.
    pub fn is_same_bar(&self, other: &Progress) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Hands the bar's state to its live view.
fn show_live(counts: &Counts, sink: &mut Sink) {
    if let Sink::Live { view, id, sent_at } = sink {
        view(&LiveUpdate {
            id: *id,
            first: sent_at.is_none(),
            done: counts.done,
            total: counts.total,
            line: &status_line(counts),
        });
        *sent_at = Some(Instant::now());
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

#[cfg(test)]
mod tests {
    use super::super::captured::Captured;
    use super::*;

    #[test]
    fn a_live_view_gets_the_first_state_then_at_most_a_few_updates_a_second_and_the_end() {
        /// (id, first, done, line) of each update.
        type Seen = Arc<Mutex<Vec<(u64, bool, u64, String)>>>;
        let seen: Seen = Arc::default();
        let log = seen.clone();
        let view: LiveView = Arc::new(move |u: &LiveUpdate| {
            let entry = (u.id, u.first, u.done, u.line.to_string());
            log.lock().unwrap().push(entry);
        });
        let bar = Progress::with_live_view(1000, "fit", view);
        bar.set_message("loss 0.5");
        for _ in 0..1000 {
            bar.inc(1);
        }
        bar.finish();
        let seen = seen.lock().unwrap();
        // The first step, then nothing until 250 ms pass, then the end.
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen[0].1 && !seen[1].1, "only the first is first: {seen:?}");
        assert_eq!(seen[0].0, seen[1].0, "one bar, one id");
        assert_eq!((seen[0].2, seen[1].2), (1, 1000));
        assert!(
            seen[1].3.starts_with("fit  1000/1000 (100%)"),
            "{}",
            seen[1].3
        );
        assert!(seen[1].3.ends_with("loss 0.5"), "{}", seen[1].3);
    }

    #[test]
    fn a_short_bar_prints_one_line_when_it_ends_with_rate_and_message() {
        let out = Captured::default();
        let bar = Progress::with_writer(100, "train", Box::new(out.clone()));
        bar.set_message("loss 0.12345678");
        for _ in 0..100 {
            bar.inc(1);
        }
        bar.finish();
        let lines = out.lines();
        assert_eq!(lines.len(), 1, "one line for a short bar: {lines:?}");
        let last = &lines[0];
        assert!(
            last.starts_with("train  100/100 (100%)  ")
                && last.contains(" it/s  done in ")
                && last.ends_with("  loss 0.1235"),
            "{last}"
        );
    }

    #[test]
    fn a_long_bar_prints_a_line_each_interval_with_its_eta() {
        let out = Captured::default();
        let bar = Progress::with_writer(100, "train", Box::new(out.clone()));
        bar.inc(49);
        // As if the interval had passed since the bar started.
        if let Sink::Lines { printed_at, .. } = &mut bar.lock().sink {
            *printed_at -= LINE_INTERVAL;
        }
        bar.inc(1);
        bar.inc(1);
        let lines = out.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("train  50/100 (50%)  ") && lines[0].contains(" it/s  ETA "),
            "{}",
            lines[0]
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
}
