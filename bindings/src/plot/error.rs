//! What can go wrong while drawing a chart.

use std::fmt;
use std::path::PathBuf;

/// A chart could not be drawn or written.
#[derive(Debug)]
pub enum PlotError {
    /// Nothing finite to draw (`what` names the input, e.g. "series 'loss'").
    Empty { what: String },
    /// `log_y` was asked for but a value is zero or negative.
    NonPositiveLog {
        what: String,
        index: usize,
        value: f64,
    },
    /// An option or argument is out of range or inconsistent.
    Invalid(String),
    /// The output folder could not be created.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// plotters failed while drawing or encoding.
    Draw { path: PathBuf, message: String },
}

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlotError::Empty { what } => {
                write!(f, "{what} has no finite values to plot")
            }
            PlotError::NonPositiveLog { what, index, value } => write!(
                f,
                "log_y needs positive values, but {what} has {value} at index {index}"
            ),
            PlotError::Invalid(message) => f.write_str(message),
            PlotError::Io { path, source } => {
                write!(
                    f,
                    "cannot create the folder for '{}': {source}",
                    path.display()
                )
            }
            PlotError::Draw { path, message } => {
                write!(f, "cannot draw '{}': {message}", path.display())
            }
        }
    }
}

impl std::error::Error for PlotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PlotError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
