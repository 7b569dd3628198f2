//! `plot::` charts written as PNG files with plotters.
//!
//! The rendering layer ([`line`], [`line_xy`], [`scatter`], [`hist`]) takes plain Rust values;
//! [`rhai_api`] converts script values and registers the `plot` module. Every written file
//! is remembered until [`drain_written_plots`], so the notebook runner can embed the plots a
//! cell made.

mod canvas;
mod confusion_api;
mod error;
mod heatmap;
mod hist;
mod line;
mod options;
pub mod rhai_api;
mod scatter;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use error::PlotError;
pub use heatmap::{heatmap, AxisNames};
pub use hist::{hist, DEFAULT_BINS};
pub use line::{line, line_xy};
pub use options::PlotOptions;
pub use rhai_api::{register, values_from_dynamic};
pub use scatter::scatter;

static WRITTEN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The plots written since the last call, oldest first; the list is emptied.
pub fn drain_written_plots() -> Vec<PathBuf> {
    std::mem::take(&mut *WRITTEN.lock().unwrap_or_else(|e| e.into_inner()))
}

fn record_written(path: &Path) {
    WRITTEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(path.to_path_buf());
}
