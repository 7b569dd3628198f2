//! The residual stream between the halves of the decoder layers (attention, then feed-forward):
//! its sum so far, and the last half's output while it is not yet added in.
//!
//! Each half ends with an output product and begins with a norm. In a decode step the fused
//! product kernel adds the stream in its epilogue, so nothing is left pending. Elsewhere
//! (training, a prompt) the output is left pending and the next norm adds it
//! (`RmsNorm::add_forward_as`): one kernel reads the stream once for both, forward and
//! backward, where a separate add would take a pass of its own each way.

use crate::amp::products_dtype;
use crate::nn::{Linear, Module, RmsNorm};
use crate::ops::fused_linear::runs_fused_kernel;
use crate::{DType, Result, Tensor};

pub struct Residual {
    sum: Tensor,
    pending: Option<Tensor>,
}

impl Residual {
    /// A stream that starts at `x` (the embeddings).
    pub fn new(x: Tensor) -> Self {
        Residual {
            sum: x,
            pending: None,
        }
    }

    /// Whether an output waits to be added.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// The stream, for a caller that found nothing pending (`is_pending`), which norms it
    /// itself.
    pub fn into_sum(self) -> Tensor {
        self.sum
    }

    /// The stream with its pending output added (for callers that take a half on its own).
    pub fn into_tensor(self) -> Result<Tensor> {
        match self.pending {
            Some(output) => self.sum.add(&output),
            None => Ok(self.sum),
        }
    }

    /// The stream `x` after a half whose output product reads `input`: x + input Wᵀ of
    /// `linear`, added in the product's epilogue when the fused decode kernel runs it, else
    /// pending.
    pub fn after(x: Tensor, input: &Tensor, linear: &Linear) -> Result<Residual> {
        let output = match linear.product_weight() {
            Some(w) if runs_fused_kernel(input, w)? => {
                return Ok(Residual::new(input.linear_residual(w, Some(&x))?));
            }
            Some(w) => input.linear_residual(w, None)?,
            None => linear.forward(input)?,
        };
        Ok(Residual {
            sum: x,
            pending: Some(output),
        })
    }

    /// The stream with its pending output added, and normed by `norm` for the products that
    /// read it (cast for them under mixed precision).
    pub fn normed_for_products(self, norm: &RmsNorm) -> Result<(Tensor, Tensor)> {
        let dtype = products_dtype(&self.sum);
        self.add_and_norm(norm, dtype)
    }

    /// The last layer's stream, its pending output added, normed by the final `norm`: for the
    /// head's products (`normed_for_products`'s dtype) or in the stream's own dtype.
    pub fn finish(self, norm: &RmsNorm, for_products: bool) -> Result<Tensor> {
        let dtype = match for_products {
            true => products_dtype(&self.sum),
            false => self.sum.dtype(),
        };
        Ok(self.add_and_norm(norm, dtype)?.1)
    }

    fn add_and_norm(self, norm: &RmsNorm, dtype: DType) -> Result<(Tensor, Tensor)> {
        norm.add_forward_as(&self.sum, self.pending.as_ref(), dtype)
    }
}
