//! The weight of a product in a layer's forward pass: a dense [n, k] tensor, or a frozen
//! block-quantized matrix (a GGUF file's Q4_K blocks kept on the device). The fused decode
//! products (ops/fused_linear.rs) take either, so a quantized model's decode step runs the
//! same few kernels as a dense one.

use super::quant_matmul::QuantizedMatrix;
use crate::{Device, Error, Result, Tensor};

#[derive(Clone, Copy)]
pub enum ProductWeight<'a> {
    Dense(&'a Tensor),
    Blocks(&'a QuantizedMatrix),
}

impl<'a> From<&'a Tensor> for ProductWeight<'a> {
    fn from(w: &'a Tensor) -> Self {
        ProductWeight::Dense(w)
    }
}

impl<'a> From<&'a QuantizedMatrix> for ProductWeight<'a> {
    fn from(q: &'a QuantizedMatrix) -> Self {
        ProductWeight::Blocks(q)
    }
}

impl<'a> ProductWeight<'a> {
    /// [n, k] (a dense weight's shape, whatever its rank, for the checks to name).
    pub fn shape(&self) -> Vec<usize> {
        match self {
            ProductWeight::Dense(w) => w.shape().to_vec(),
            ProductWeight::Blocks(q) => q.shape().to_vec(),
        }
    }

    pub fn device(&self) -> Device {
        match self {
            ProductWeight::Dense(w) => w.device(),
            ProductWeight::Blocks(q) => q.device(),
        }
    }

    /// The dense tensor, if this is one.
    pub fn dense(&self) -> Option<&'a Tensor> {
        match *self {
            ProductWeight::Dense(w) => Some(w),
            ProductWeight::Blocks(_) => None,
        }
    }

    /// Checks the weight is [n, k] (a float tensor if dense) on x's device.
    pub(crate) fn check(&self, op: &'static str, x: &Tensor, k: usize, i: usize) -> Result<()> {
        match self {
            ProductWeight::Dense(w) => {
                w.check_float(op)?;
                x.check_same_device(op, w)?;
            }
            ProductWeight::Blocks(q) if q.device() != x.device() => {
                return Err(Error::invalid(
                    op,
                    format!(
                        "weight {i} is on {:?}, the input on {:?}",
                        q.device(),
                        x.device()
                    ),
                ));
            }
            ProductWeight::Blocks(_) => {}
        }
        let shape = self.shape();
        if shape.len() != 2 || shape[1] != k {
            return Err(Error::invalid(
                op,
                format!(
                    "weight {i} is {shape:?}, but [n, {k}] multiplies an input {:?}",
                    x.shape()
                ),
            ));
        }
        Ok(())
    }

    /// y = x Wᵀ as `Linear::forward` computes it: leading dims flattened into rows beyond
    /// rank 2 (a quantized weight's product flattens them itself).
    pub fn product(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            ProductWeight::Blocks(q) => q.matmul_t(x),
            ProductWeight::Dense(w) => {
                let (n, k) = (w.shape()[0], w.shape()[1]);
                if x.rank() > 2 {
                    let mut shape = x.shape().to_vec();
                    shape[x.rank() - 1] = n;
                    x.reshape_to(&[x.numel() / k, k])?
                        .matmul(&w.t()?)?
                        .reshape_to(&shape)
                } else {
                    x.matmul(&w.t()?)
                }
            }
        }
    }
}

/// The dense tensors of `weights`, if every one is dense.
pub fn all_dense<'a>(weights: &[ProductWeight<'a>]) -> Option<Vec<&'a Tensor>> {
    weights.iter().map(ProductWeight::dense).collect()
}
