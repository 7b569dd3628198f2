//! Gradient checking against central finite differences in F64.

use crate::autograd::no_grad;
use crate::random::Generator;
use crate::{DType, Error, Result, Tensor};

#[derive(Clone, Copy, Debug)]
pub struct GradcheckOptions {
    pub eps: f64,
    pub atol: f64,
    pub rtol: f64,
}

impl Default for GradcheckOptions {
    fn default() -> Self {
        GradcheckOptions {
            eps: 1e-6,
            atol: 1e-6,
            rtol: 1e-4,
        }
    }
}

/// Checks the gradient of `f` with respect to every float input. The output is contracted with
/// fixed random weights, so each output element gets its own upstream gradient. Inputs are cast
/// to F64; integer inputs (indices) are passed through unchanged and not checked.
pub fn gradcheck(
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    opts: GradcheckOptions,
) -> Result<()> {
    let inputs: Vec<Tensor> = inputs
        .iter()
        .map(|t| {
            if t.dtype().is_float() {
                t.to_dtype(DType::F64).map(|x| x.detach())
            } else {
                Ok(t.detach())
            }
        })
        .collect::<Result<_>>()?;
    let probe = no_grad(|| f(&inputs))?;
    let weights = Tensor::randn(probe.shape(), DType::F64, Some(&mut Generator::new(0x5eed)))?;
    let objective = |xs: &[Tensor]| -> Result<f64> {
        no_grad(|| f(xs)?.to_dtype(DType::F64)?.mul(&weights)?.sum()?.item())
    };

    let leaves: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.contiguous_copy())
        .collect::<Result<_>>()?;
    for t in leaves.iter().filter(|t| t.dtype() == DType::F64) {
        t.set_requires_grad(true)?;
    }
    let out = f(&leaves)?;
    out.to_dtype(DType::F64)?.mul(&weights)?.sum()?.backward()?;

    for (i, leaf) in leaves.iter().enumerate() {
        if leaf.dtype() != DType::F64 {
            continue;
        }
        let analytic = match leaf.grad() {
            Some(g) => g.to_vec::<f64>()?,
            None => vec![0.0; leaf.numel()],
        };
        let base = inputs[i].to_vec::<f64>()?;
        for j in 0..base.len() {
            let eval = |delta: f64| -> Result<f64> {
                let mut v = base.clone();
                v[j] += delta;
                let mut xs = inputs.clone();
                xs[i] = Tensor::from_vec(v, inputs[i].shape())?;
                objective(&xs)
            };
            let numeric = (eval(opts.eps)? - eval(-opts.eps)?) / (2.0 * opts.eps);
            let diff = (analytic[j] - numeric).abs();
            // Written negated on purpose: a NaN difference must fail the check.
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            if !(diff <= opts.atol + opts.rtol * numeric.abs()) {
                return Err(Error::Backward(format!(
                    "gradcheck: input {i} element {j}: analytic {} vs numeric {numeric} (|diff| {diff})",
                    analytic[j]
                )));
            }
        }
    }
    Ok(())
}
