//! Workspace-level integration tests live in tests/*.rs of this crate.
