//! The engine's one output channel for notices and warnings (a CPU fallback, a skipped
//! non-finite step, a kernel compiled for the first time). The REPL, `brain run` and notebook
//! reports install a sink that shows each message where it belongs; the default prints to stderr.

use std::sync::{Arc, RwLock};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Warning,
}

pub type Sink = Arc<dyn Fn(Level, &str) + Send + Sync>;

static SINK: RwLock<Option<Sink>> = RwLock::new(None);

/// Installs the sink that receives every message; returns the previous one.
pub fn set_sink(sink: Option<Sink>) -> Option<Sink> {
    std::mem::replace(&mut *SINK.write().unwrap_or_else(|e| e.into_inner()), sink)
}

pub fn emit(level: Level, text: &str) {
    let sink = SINK.read().unwrap_or_else(|e| e.into_inner()).clone();
    match sink {
        Some(s) => s(level, text),
        None => eprintln!(
            "{}{text}",
            if level == Level::Warning {
                "warning: "
            } else {
                ""
            }
        ),
    }
}

pub fn info(text: &str) {
    emit(Level::Info, text)
}

pub fn warn(text: &str) {
    emit(Level::Warning, text)
}

/// `warn`, once per distinct text in this process: for a warning a loop would repeat every
/// step (a prompt cut to the text encoder's context, each time a training loop encodes it).
pub fn warn_once(text: &str) {
    use std::collections::HashSet;
    use std::hash::{DefaultHasher, Hash, Hasher};
    use std::sync::Mutex;
    static SEEN: Mutex<Option<HashSet<u64>>> = Mutex::new(None);
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let seen = seen.get_or_insert_with(HashSet::new);
    // Bounded: a run that warns about ten thousand different texts starts over.
    if seen.len() > 10_000 {
        seen.clear();
    }
    if seen.insert(h.finish()) {
        warn(text);
    }
}
