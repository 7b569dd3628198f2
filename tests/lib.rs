//! Helpers shared by the workspace-level integration tests in `tests/tests/*.rs`.

pub mod alloc_meter;
pub mod assets;
pub mod corruption;
pub mod lm_fixtures;
pub mod parity;
pub mod ultralytics_python;
