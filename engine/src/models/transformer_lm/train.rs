//! The training step and the evaluation pass of a language model, so scripts get them as one
//! call while the parts (`loss`, `backward`, `step`) stay available to write by hand.

use super::TransformerLm;
use crate::dist::buckets::DEFAULT_BUCKET_BYTES;
use crate::optim::{Optimizer, StepOutcome};
use crate::{no_grad, Device, Error, Result, Tensor};

/// One optimizer step over `micro_batches` of (ids, targets): gradients accumulate over all of
/// them, each loss scaled by 1/n, so the step sees the mean gradient of the whole batch.
/// Returns the mean loss as a detached scalar on the model's device (reading it is the
/// caller's choice: on CUDA a read waits for the step).
///
/// Under `brain launch` the batch is every rank's micro-batches together: each loss is scaled
/// by 1/(n * ranks), the gradients are summed across ranks (NCCL) and so is the returned loss.
/// The sums start during the last micro-batch's backward, a bucket as soon as its gradients
/// are in, and overlap the rest of it; the earlier micro-batches only accumulate. Every rank
/// then steps the same gradients, so the norm every rank clips by, and whether a non-finite
/// step is skipped, agree without further exchange.
pub fn train_step(
    model: &TransformerLm,
    opt: &mut dyn Optimizer,
    micro_batches: &[(Tensor, Tensor)],
) -> Result<(Tensor, StepOutcome)> {
    if micro_batches.is_empty() {
        return Err(Error::invalid("train_step", "no batches to train on"));
    }
    let dist = crate::dist::current()?;
    let ranks = if dist.reduces() { dist.world_size } else { 1 };
    let scale = 1.0 / (micro_batches.len() * ranks) as f64;
    opt.zero_grad();
    let mut total: Option<Tensor> = None;
    let params = opt.core().tensors();
    for (i, (x, y)) in micro_batches.iter().enumerate() {
        let loss = model.loss(x, y)?;
        let scaled = loss.mul_scalar(scale)?;
        if dist.reduces() && i + 1 == micro_batches.len() {
            let mut reducer = dist.grad_reducer(&params, DEFAULT_BUCKET_BYTES);
            scaled.backward_notifying(None, false, &mut |leaf| reducer.gradient_ready(leaf))?;
            reducer.finish()?;
        } else {
            scaled.backward()?;
        }
        let part = loss.detach().mul_scalar(scale)?;
        total = Some(match total {
            Some(t) => t.add(&part)?,
            None => part,
        });
    }
    // Non-empty input makes total Some.
    let total = total.ok_or_else(|| Error::invalid("train_step", "no batches"))?;
    if dist.reduces() {
        dist.all_reduce_sum_(&total)?;
    }
    let outcome = opt.step()?;
    opt.zero_grad();
    Ok((total, outcome))
}

/// Mean loss and perplexity over evaluation batches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    /// Mean cross-entropy per token, in nats.
    pub loss: f64,
    pub perplexity: f64,
    pub tokens: usize,
}

/// Evaluates without gradients; the per-batch losses stay on the device until the end.
pub fn evaluate(
    model: &TransformerLm,
    batches: impl IntoIterator<Item = Result<(Tensor, Tensor)>>,
) -> Result<Evaluation> {
    no_grad(|| {
        let mut sum: Option<Tensor> = None;
        let mut tokens = 0;
        for batch in batches {
            crate::cancel::check()?;
            let (x, y) = batch?;
            let n = y.numel();
            let part = model.loss(&x, &y)?.mul_scalar(n as f64)?;
            sum = Some(match sum {
                Some(s) => s.add(&part)?,
                None => part,
            });
            tokens += n;
        }
        let sum = sum.ok_or_else(|| Error::invalid("evaluate", "no evaluation batches"))?;
        let loss = sum.to_device(Device::Cpu)?.item()? / tokens as f64;
        Ok(Evaluation {
            loss,
            perplexity: loss.exp(),
            tokens,
        })
    })
}
