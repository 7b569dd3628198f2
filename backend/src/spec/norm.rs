//! LayerNorm and RMSNorm as the kernels see them.

/// One norm call: `rows` contiguous rows of `cols` elements.
#[derive(Clone, Copy, Debug)]
pub struct NormSpec {
    pub rows: usize,
    pub cols: usize,
    pub eps: f64,
    /// RMSNorm (no mean subtracted, no bias) rather than LayerNorm.
    pub rms: bool,
}
