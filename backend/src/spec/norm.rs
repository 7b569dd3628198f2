//! LayerNorm, RMSNorm and BatchNorm as the kernels see them.

/// One norm call: `rows` contiguous rows of `cols` elements.
#[derive(Clone, Copy, Debug)]
pub struct NormSpec {
    pub rows: usize,
    pub cols: usize,
    pub eps: f64,
    /// RMSNorm (no mean subtracted, no bias) rather than LayerNorm.
    pub rms: bool,
}

/// One batch-norm call: a contiguous [outer, channels, inner] tensor (NCHW: outer = N, inner =
/// H * W), normalized per channel over its outer * inner values.
#[derive(Clone, Copy, Debug)]
pub struct BatchNormSpec {
    pub outer: usize,
    pub channels: usize,
    pub inner: usize,
    pub eps: f64,
    /// The activation after the norm (a convolution block's), fused both ways: the output is
    /// act(y), and the backward recomputes y from x.
    pub act: NormAct,
}

/// What follows a fused batch norm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NormAct {
    #[default]
    None,
    Silu,
    Relu,
}

impl NormAct {
    /// The kernels' `act` argument (kernels/batch_norm.cu).
    pub fn code(self) -> i32 {
        match self {
            NormAct::None => 0,
            NormAct::Silu => 1,
            NormAct::Relu => 2,
        }
    }
}

impl BatchNormSpec {
    /// Values per channel.
    pub fn count(&self) -> usize {
        self.outer * self.inner
    }

    pub fn numel(&self) -> usize {
        self.outer * self.channels * self.inner
    }
}
