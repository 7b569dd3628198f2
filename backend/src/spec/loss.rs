//! Fused cross-entropy over [rows, cols] logits with i64 targets: one call's shape and options.

/// One call's shape and options.
#[derive(Clone, Copy, Debug)]
pub struct CrossEntropySpec {
    pub rows: usize,
    pub cols: usize,
    pub ignore: i64,
    pub smoothing: f64,
}

impl CrossEntropySpec {
    /// The target of row `r` when it counts (not ignored, in range).
    pub fn target(&self, t: i64) -> Option<usize> {
        (t != self.ignore && t >= 0 && (t as u64) < self.cols as u64).then_some(t as usize)
    }
}
