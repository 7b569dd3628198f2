//! linear_cross_entropy: cross-entropy of hidden · weight^T against class ids, the head and
//! loss of a language model as one op.
//!
//! On CUDA in BF16/F16 (or under mixed precision) the rows go through in chunks of about 1 GiB
//! of logits: each chunk's logits, loss, gradient and its two products are computed in the
//! forward, and the chunk is freed. The logits are written in the products' dtype, as an
//! autocast head leaves them (PyTorch's reference then takes the loss of those values in F32,
//! and so does the kernel); the loss kernel reads them once for the loss and once for the
//! gradient, which it writes in that dtype. The full [rows, classes] logits never exist, nor
//! their gradient in F32. The backward only scales the saved gradients by the upstream one (the
//! loss is linear in it). Everywhere else the op is `matmul_out` followed by `cross_entropy`.

use super::backward_fn;
use super::dispatch::cuda_kernel;
use super::loss::{cross_entropy, CrossEntropyOptions, Reduction};
use super::matmul::matmul_accumulate;
use crate::autograd::{is_grad_enabled, no_grad};
use crate::backend::cuda::loss as cuda;
use crate::backend::spec::CrossEntropySpec;
use crate::backend::Storage;
use crate::{DType, Device, Error, Result, Tensor};

const OP: &str = "linear_cross_entropy";

/// Bytes of logits per chunk, at most: 1 GiB, or `RB_LOGITS_CHUNK_MIB` MiB (to measure the
/// trade of memory for fewer, larger products).
fn chunk_bytes() -> usize {
    std::env::var("RB_LOGITS_CHUNK_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&m| m > 0)
        .map_or(1 << 30, |m| m << 20)
}

/// Cross-entropy of `hidden` [..., d] · `weight`^T ([classes, d]) against `targets` (class
/// ids shaped like hidden's leading dims), with cross_entropy's options.
pub fn linear_cross_entropy(
    hidden: &Tensor,
    weight: &Tensor,
    targets: &Tensor,
    opts: CrossEntropyOptions,
) -> Result<Tensor> {
    hidden.check_float(OP)?;
    weight.check_float(OP)?;
    hidden.check_same_device(OP, weight)?;
    let d = *hidden.shape().last().unwrap_or(&0);
    if hidden.rank() < 2 || weight.rank() != 2 || weight.shape()[1] != d {
        return Err(Error::invalid(
            OP,
            format!(
                "hidden [..., d] needs a weight [classes, d]; got hidden {:?} and weight {:?}",
                hidden.shape(),
                weight.shape()
            ),
        ));
    }
    let lead = &hidden.shape()[..hidden.rank() - 1];
    if targets.shape() != lead {
        return Err(Error::ShapeMismatch {
            op: OP,
            lhs: hidden.shape().to_vec(),
            rhs: targets.shape().to_vec(),
        });
    }
    let dtype = hidden.dtype().promote(weight.dtype());
    let low = match crate::amp::matmul_operand_dtype(hidden.device(), dtype) {
        Some(low) => low,
        None => dtype,
    };
    let fused = matches!(hidden.device(), Device::Cuda(_))
        && matches!(low, DType::BF16 | DType::F16)
        && opts.reduction != Reduction::None
        && !targets.dtype().is_float()
        && (0.0..=1.0).contains(&opts.label_smoothing);
    if fused {
        return chunked(hidden, weight, targets, low, opts);
    }
    // Logits in F32 from low-precision products (F64 stays F64), as the model's head writes them.
    let logits_dtype = if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let rows = targets.numel();
    let logits = hidden
        .reshape_to(&[rows, d])?
        .matmul_out(&weight.t()?, logits_dtype)?;
    cross_entropy(&logits, &targets.reshape_to(&[rows])?, opts)
}

/// The CUDA path: loss, and the gradients per unit of upstream gradient, chunk by chunk.
fn chunked(
    hidden: &Tensor,
    weight: &Tensor,
    targets: &Tensor,
    low: DType,
    opts: CrossEntropyOptions,
) -> Result<Tensor> {
    let (rows, d, classes) = (targets.numel(), weight.shape()[1], weight.shape()[0]);
    let spec = |rows| CrossEntropySpec {
        rows,
        cols: classes,
        ignore: opts.ignore_index.unwrap_or(i64::MIN),
        smoothing: opts.label_smoothing,
    };
    // Evaluation (no grad mode, or nothing to train) takes only the loss. A frozen weight (a
    // LoRA or QLoRA base's head) needs no gradient: its [classes, d] F32 sum would be the
    // largest buffer of the step after the weight itself.
    let grads = is_grad_enabled() && (hidden.requires_grad() || weight.requires_grad());
    let weight_grad = grads && weight.requires_grad();
    let chunks = (rows * classes * low.size_in_bytes())
        .div_ceil(chunk_bytes())
        .max(1);
    let chunk = rows.div_ceil(chunks).max(1);
    let (loss, count, dh, dw) = no_grad(|| -> Result<_> {
        let h = hidden.reshape_to(&[rows, d])?.to_dtype(low)?.contiguous()?;
        let w = weight.to_dtype(low)?.contiguous()?;
        let t = targets
            .reshape_to(&[rows])?
            .to_dtype(DType::I64)?
            .contiguous()?;
        let (mut loss, mut count, mut dw): (Option<Tensor>, Option<Tensor>, Option<Tensor>) =
            (None, None, None);
        let mut dh = Vec::with_capacity(chunks);
        for r0 in (0..rows).step_by(chunk) {
            let c = chunk.min(rows - r0);
            let hc = h.narrow(0, r0, c)?;
            let logits = hc.matmul_out(&w.t()?, low)?.contiguous()?;
            let tp = cuda_kernel(OP, [&t], |[(ts, tl)]| Ok(ts.ptr_at(tl.offset())))?;
            let tp = tp + (r0 * 8) as u64;
            // With gradients, `valid` (1 for counted rows, 0 for ignored ones) is the upstream
            // gradient of each row's loss: the mean's scale is applied in the backward.
            let (rows_out, g) = cuda_kernel(OP, [&logits], |[(xs, xl)]| match grads {
                true => cuda::cross_entropy_with_gradient(xs, xl.offset(), tp, spec(c), low)
                    .map(|(rows, g)| (rows, Some(g))),
                false => Ok((
                    cuda::cross_entropy_forward(xs, xl.offset(), tp, spec(c))?,
                    None,
                )),
            })?;
            let (sum, valid, g) = (
                Tensor::from_storage(Storage::Cuda(rows_out.loss), &[c])?.sum()?,
                Tensor::from_storage(Storage::Cuda(rows_out.valid), &[c])?.sum()?,
                g.map(|g| Tensor::from_storage(Storage::Cuda(g), &[c, classes]))
                    .transpose()?,
            );
            drop(logits);
            let add = |acc: Option<Tensor>, x: Tensor| match acc {
                Some(a) => a.add(&x),
                None => Ok(x),
            };
            if let Some(g) = g {
                dh.push(g.matmul(&w)?);
                if weight_grad {
                    match &dw {
                        // Later chunks add into the first chunk's sum in the product itself.
                        Some(sum) => matmul_accumulate(sum, &g.t()?, &hc)?,
                        None => dw = Some(g.t()?.matmul_out(&hc, DType::F32)?),
                    }
                }
            }
            loss = Some(add(loss, sum)?);
            count = Some(add(count, valid)?);
        }
        let (Some(loss), Some(count)) = (loss, count) else {
            return Err(Error::invalid(OP, "no rows to take the loss of"));
        };
        let dh = match dh.is_empty() {
            true => None,
            false => Some(Tensor::cat(&dh, 0)?),
        };
        Ok((loss, count, dh, dw))
    })?;
    let mean = opts.reduction == Reduction::Mean;
    let out = if mean { loss.div(&count)? } else { loss };
    let (hidden_shape, hidden_dtype, weight_dtype) =
        (hidden.shape().to_vec(), hidden.dtype(), weight.dtype());
    let Some(dh) = dh else {
        return Ok(out);
    };
    Ok(out.recorded(&[hidden, weight], move || {
        backward_fn(OP, move |g, needs| {
            let scale = if mean { g.div(&count)? } else { g.clone() };
            // Scaled in F32 (or F64) and rounded once to the states' dtype: BF16 states (the
            // final norm writes them under mixed precision) get the product of the scale and
            // the chunk's gradient, not of their roundings.
            let dh = match needs[0] {
                true => {
                    let compute = hidden_dtype.compute_dtype();
                    let scaled = dh.to_dtype(compute)?.mul(&scale.to_dtype(compute)?)?;
                    Some(scaled.to_dtype(hidden_dtype)?.reshape_to(&hidden_shape)?)
                }
                false => None,
            };
            let dw = match (needs[1], &dw) {
                (true, Some(dw)) => Some(dw.mul(&scale)?.to_dtype(weight_dtype)?),
                _ => None,
            };
            Ok(vec![dh, dw])
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Generator;

    fn randn(shape: &[usize], seed: u64) -> Tensor {
        Tensor::randn(shape, DType::F32, Some(&mut Generator::new(seed))).unwrap()
    }

    #[test]
    fn the_loss_is_cross_entropy_of_the_projected_rows() {
        let (h, w) = (randn(&[2, 3, 4], 1), randn(&[6, 4], 2));
        let t = Tensor::from_vec(vec![5i64, 0, -100, 2, 3, 1], &[2, 3]).unwrap();
        let got = linear_cross_entropy(&h, &w, &t, CrossEntropyOptions::default()).unwrap();
        let logits = h
            .reshape_to(&[6, 4])
            .unwrap()
            .matmul(&w.t().unwrap())
            .unwrap();
        let want = cross_entropy(
            &logits,
            &t.flatten().unwrap(),
            CrossEntropyOptions::default(),
        );
        let (g, w) = (got.item().unwrap(), want.unwrap().item().unwrap());
        assert!((g - w).abs() < 1e-6, "{g} vs {w}");
    }

    #[test]
    fn mismatched_hidden_weight_and_targets_are_errors() {
        let t = Tensor::from_vec(vec![0i64, 1], &[2]).unwrap();
        let opts = CrossEntropyOptions::default;
        let e = linear_cross_entropy(&randn(&[2, 4], 1), &randn(&[6, 5], 2), &t, opts())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("weight [classes, d]") && e.contains("[6, 5]"),
            "{e}"
        );
        let t3 = Tensor::from_vec(vec![0i64, 1, 2], &[3]).unwrap();
        assert!(linear_cross_entropy(&randn(&[2, 4], 1), &randn(&[6, 4], 2), &t3, opts()).is_err());
    }
}
