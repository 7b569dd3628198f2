//! Fused scaled-dot-product attention: the problem as the kernels see it.

/// The problem: q [batch, heads, tq, head_dim] against k, v [batch, kv_heads, tk, head_dim].
#[derive(Clone, Copy, Debug)]
pub struct AttentionSpec {
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub tq: usize,
    pub tk: usize,
    pub head_dim: usize,
    pub causal: bool,
    pub scale: f64,
}
