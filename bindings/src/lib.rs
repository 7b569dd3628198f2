//! Rhai bindings for the engine (filled in by the Rhai host issue).
