//! Options shared by every chart kind.

use std::path::PathBuf;

use super::PlotError;

/// Title, labels, output file and scale of a chart.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotOptions {
    pub title: Option<String>,
    pub xlabel: Option<String>,
    pub ylabel: Option<String>,
    /// Output PNG file; parent folders are created.
    pub path: PathBuf,
    pub width: u32,
    pub height: u32,
    /// Exponential moving average weight in `0..1` drawn over the raw line (line charts only).
    pub smooth: Option<f64>,
    /// Logarithmic y axis.
    pub log_y: bool,
}

impl Default for PlotOptions {
    fn default() -> Self {
        PlotOptions {
            title: None,
            xlabel: None,
            ylabel: None,
            path: PathBuf::from("plot.png"),
            width: 800,
            height: 500,
            smooth: None,
            log_y: false,
        }
    }
}

impl PlotOptions {
    /// Rejects sizes and weights that cannot make a readable chart.
    pub(crate) fn validate(&self) -> Result<(), PlotError> {
        let sizes = 100..=10_000;
        if !sizes.contains(&self.width) || !sizes.contains(&self.height) {
            return Err(PlotError::Invalid(format!(
                "width and height must be between 100 and 10000 pixels, got {}x{}",
                self.width, self.height
            )));
        }
        if let Some(w) = self.smooth {
            if !(0.0..1.0).contains(&w) {
                return Err(PlotError::Invalid(format!(
                    "smooth must be a weight in 0..1 (e.g. 0.9), got {w}"
                )));
            }
        }
        let is_png = self
            .path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("png"));
        if !is_png {
            return Err(PlotError::Invalid(format!(
                "plot path must end in .png, got '{}'",
                self.path.display()
            )));
        }
        Ok(())
    }
}
