//! Progress bars for long loops.
//!
//! On a terminal the bar is drawn by indicatif; otherwise (logs, pipes, notebooks) it prints
//! a plain line when it ends and every 15 seconds while it runs:
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
//! Each iteration checks the engine's cancel flag (`rusting_brain::cancel`, which Ctrl-C sets);
//! once set, the loop stops with the error "cancelled".

mod bar;
#[cfg(test)]
mod captured;
mod iter;
pub(crate) mod short_numbers;

pub use bar::{set_live_view, LiveUpdate, LiveView, Progress};
pub use iter::{print_line, ProgressIter, ScriptProgress};

use iter::Items;
use rhai::{Array, Dynamic, Engine, FuncRegistration, INT};
use std::ops::{Range, RangeInclusive};

/// Registers `progress(...)`, `bar.set_message(text)` and `progress_message(text)`.
pub fn register(engine: &mut Engine) {
    for (name, signature, doc, example) in [
        ("progress", "progress(range | count | array, label) -> Progress", "Iterates with a progress bar showing rate, ETA and a message; plain lines when stdout is not a terminal. Ctrl-C stops it.", "for step in progress(0..100, \"train\") { progress_message(`step ${step}`); }"),
        ("progress_message", "progress_message(text)", "Sets the message of the innermost running progress bar (e.g. the loss).", "let loss = randn([4]).mean(); for i in progress(0..3, \"train\") { progress_message(`loss ${loss.item()}`); }"),
        ("set_message", "bar.set_message(text)", "Sets this progress bar's message.", "let bar = progress(3, \"warmup\"); bar.set_message(\"warming up\"); for i in bar { }"),
    ] {
        crate::help::record_entry(name, signature, doc, example);
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
            if let Some(bar) = iter::innermost() {
                bar.set_message(&text.to_string());
            }
        });
}
