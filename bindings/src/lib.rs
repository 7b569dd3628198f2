//! Rhai bindings for the engine (filled in by the Rhai host issue).

pub mod plot;
pub mod progress;
