//! batch_norm as torch.nn.functional.batch_norm: per-channel normalization of an [N, C, ...]
//! input (channels at dim 1), with the batch's own statistics in training (biased variance for
//! the output, the unbiased one for the running statistics) and the running statistics in
//! eval. One node whose fused backward gives dx, dweight and dbias. Statistics run in FP32
//! (F64 for F64 inputs); the output keeps the input's dtype, so a BF16 activation from a
//! mixed-precision convolution is normalized without a cast either way.

use super::backward_fn;
use super::dispatch::{dispatch, dispatch_into, dispatch_optional, CpuOperand, CudaOperand};
use crate::autograd::{no_grad, SavedTensor};
use crate::backend::cpu::batch_norm as cpu;
use crate::backend::cpu::norm::Part;
use crate::backend::cuda::batch_norm as cuda;
use crate::backend::spec::{BatchNormSpec, NormAct};
use crate::backend::Storage;
use crate::{DType, Error, Result, Tensor};

const OP: &str = "batch_norm";

impl Tensor {
    /// Normalizes each channel (dim 1) of an [N, C, ...] tensor, then scales by `weight` and
    /// shifts by `bias` ([C] each, when given), as torch.nn.functional.batch_norm.
    /// - `training`: with this batch's mean and biased variance; `running` ([C] mean and
    ///   variance), when given, is updated in place to (1 - momentum) * running + momentum *
    ///   batch, with the unbiased variance. Needs more than one value per channel.
    /// - otherwise: with `running`, which is then required.
    pub fn batch_norm(
        &self,
        running: Option<(&Tensor, &Tensor)>,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        training: bool,
        momentum: f64,
        eps: f64,
    ) -> Result<Tensor> {
        self.batch_norm_act(
            running,
            weight,
            bias,
            training,
            momentum,
            eps,
            NormAct::None,
        )
    }

    /// `batch_norm(..)?.silu()` as one node (`batch_norm_act` with SiLU).
    pub fn batch_norm_silu(
        &self,
        running: Option<(&Tensor, &Tensor)>,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        training: bool,
        momentum: f64,
        eps: f64,
    ) -> Result<Tensor> {
        self.batch_norm_act(
            running,
            weight,
            bias,
            training,
            momentum,
            eps,
            NormAct::Silu,
        )
    }

    /// The norm followed by `act` as one node: a convolution block's norm and activation in
    /// one pass each way, and the backward recomputes the norm's output from x instead of
    /// keeping it.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_act(
        &self,
        running: Option<(&Tensor, &Tensor)>,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        training: bool,
        momentum: f64,
        eps: f64,
        act: NormAct,
    ) -> Result<Tensor> {
        let mode = Mode {
            training,
            momentum,
            act,
        };
        batch_norm(self, running, [weight, bias], mode, eps)
    }
}

/// How a batch_norm call normalizes: with the batch's statistics (updating the running ones by
/// `momentum`) or the running ones, and the activation that follows.
#[derive(Clone, Copy)]
struct Mode {
    training: bool,
    momentum: f64,
    act: NormAct,
}

fn batch_norm(
    input: &Tensor,
    running: Option<(&Tensor, &Tensor)>,
    [weight, bias]: [Option<&Tensor>; 2],
    mode: Mode,
    eps: f64,
) -> Result<Tensor> {
    let Mode {
        training,
        momentum,
        act,
    } = mode;
    let spec = BatchNormSpec {
        act,
        ..check(input, running, weight, bias, eps)?
    };
    if !momentum.is_finite() {
        return Err(Error::invalid(
            OP,
            format!("momentum must be finite, got {momentum}"),
        ));
    }
    if training && spec.count() < 2 {
        return Err(Error::invalid(
            OP,
            format!(
                "training needs more than one value per channel, got input {:?}",
                input.shape()
            ),
        ));
    }
    let cdt = input.dtype().compute_dtype();
    let (x, w, b) = no_grad(|| -> Result<_> {
        let param = |p: Option<&Tensor>| -> Result<Option<Tensor>> {
            p.map(|t| t.to_dtype(cdt)?.contiguous()).transpose()
        };
        Ok((input.contiguous()?, param(weight)?, param(bias)?))
    })?;
    let (mean, rstd) = match (training, running) {
        (true, running) => batch_stats(&x, spec, running, momentum)?,
        (false, Some((rm, rv))) => no_grad(|| -> Result<_> {
            let mean = rm.to_dtype(cdt)?.contiguous()?;
            let rstd = rv.to_dtype(cdt)?.add_scalar(eps)?.rsqrt()?.contiguous()?;
            Ok((mean, rstd))
        })?,
        (false, None) => {
            return Err(Error::invalid(
                OP,
                "eval mode normalizes with the running statistics, and none were given",
            ))
        }
    };
    let y = apply(&x, &mean, &rstd, w.as_ref(), b.as_ref(), spec)?;
    let mut inputs = vec![input];
    inputs.extend(weight);
    inputs.extend(bias);
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    let param_dtypes = (weight.map(|t| t.dtype()), bias.map(|t| t.dtype()));
    let shape = input.shape().to_vec();
    Ok(y.recorded(&inputs, move || {
        let saved_x = SavedTensor::new(OP, &x);
        let saved_w = w.as_ref().map(|w| SavedTensor::new(OP, w));
        // The fused activation's derivative needs the norm's output, recomputed with the bias.
        let saved_b = b
            .as_ref()
            .filter(|_| act != NormAct::None)
            .map(|b| SavedTensor::new(OP, b));
        backward_fn(OP, move |g, needs| {
            let x = saved_x.get()?;
            let w = saved_w.as_ref().map(|s| s.get()).transpose()?;
            let b = saved_b.as_ref().map(|s| s.get()).transpose()?;
            let g = g.to_dtype(x.dtype())?.contiguous()?;
            let need_w = has_w && needs[1];
            let need_b = has_b && needs[1 + has_w as usize];
            let [dx, dw, db] = run_backward(
                [x, &g, &mean, &rstd],
                [w, b],
                spec,
                training,
                [needs[0], need_w, need_b],
            )?;
            let param_grad = |s: Option<Storage>, dtype: Option<DType>| match (s, dtype) {
                (Some(s), Some(d)) => Ok(Some(
                    Tensor::from_storage(s, &[spec.channels])?.to_dtype(d)?,
                )),
                _ => Ok::<_, Error>(None),
            };
            let mut grads = vec![dx.map(|s| Tensor::from_storage(s, &shape)).transpose()?];
            if has_w {
                grads.push(param_grad(dw, param_dtypes.0)?);
            }
            if has_b {
                grads.push(param_grad(db, param_dtypes.1)?);
            }
            Ok(grads)
        })
    }))
}

/// The kernels' view of `x` after checking the operands against it.
fn check(
    x: &Tensor,
    running: Option<(&Tensor, &Tensor)>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<BatchNormSpec> {
    x.check_float(OP)?;
    if x.rank() < 2 {
        return Err(Error::invalid(
            OP,
            format!(
                "needs an input [N, C, ...] with channels at dim 1, got {:?}",
                x.shape()
            ),
        ));
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(
            OP,
            format!("eps must be finite and >= 0, got {eps}"),
        ));
    }
    let channels = x.shape()[1];
    let per_channel = running
        .into_iter()
        .flat_map(|(m, v)| [("running_mean", m), ("running_var", v)])
        .chain(weight.map(|w| ("weight", w)))
        .chain(bias.map(|b| ("bias", b)));
    for (name, t) in per_channel {
        t.check_float(OP)?;
        x.check_same_device(OP, t)?;
        if t.shape() != [channels] {
            return Err(Error::invalid(
                OP,
                format!(
                    "{name} must have shape [{channels}] for input {:?}, got {:?}",
                    x.shape(),
                    t.shape()
                ),
            ));
        }
    }
    Ok(BatchNormSpec {
        outer: x.shape()[0],
        channels,
        inner: x.shape()[2..].iter().product(),
        eps,
        act: NormAct::None,
    })
}

/// A CPU operand as the kernels read it: its storage from the layout's offset.
fn part((s, l): CpuOperand<'_>) -> Part<'_> {
    Part::new(s, l.offset())
}

fn ptr((s, l): CudaOperand<'_>) -> u64 {
    s.ptr_at(l.offset())
}

/// The operands are always given; an absent one would be a bug in this file.
fn missing() -> Error {
    Error::invalid(OP, "an operand is missing")
}

/// Whether the kernels can update `t` (a running statistic) in place: the whole of its own
/// storage, in the compute dtype, and not shared with the other statistic or the input.
fn updatable_in_place(t: &Tensor, other: &Tensor, x: &Tensor, cdt: DType) -> bool {
    t.dtype() == cdt
        && t.is_contiguous()
        && t.layout().offset() == 0
        && t.storage().len() == t.numel()
        && !t.shares_storage(other)
        && !t.shares_storage(x)
}

/// This batch's (mean, rstd), with the running statistics updated: by the kernels in place
/// where they can, otherwise by tensor ops after.
fn batch_stats(
    x: &Tensor,
    spec: BatchNormSpec,
    running: Option<(&Tensor, &Tensor)>,
    momentum: f64,
) -> Result<(Tensor, Tensor)> {
    let cdt = x.dtype().compute_dtype();
    let in_place = running.filter(|(rm, rv)| {
        updatable_in_place(rm, rv, x, cdt) && updatable_in_place(rv, rm, x, cdt)
    });
    let stats = |s: cpu::Stats| -> (Storage, Storage) { (s.mean.into(), s.rstd.into()) };
    let stats_gpu = |s: cuda::Stats| -> (Storage, Storage) { (s.mean.into(), s.rstd.into()) };
    // Kernels that update the running statistics write them: they are the op's targets.
    let (mean, rstd) = match in_place {
        Some((rm, rv)) => dispatch_into(
            OP,
            [rm, rv],
            [x],
            |[(m, _), (v, _)], [x]| {
                let running = cpu::RunningStats {
                    mean: m,
                    var: v,
                    momentum,
                };
                Ok(stats(cpu::stats(part(x), spec, Some(running))?))
            },
            |[m, v], [(xs, xl)]| {
                let running = cuda::RunningStats {
                    mean: m.0.ptr_at(m.1.offset()),
                    var: v.0.ptr_at(v.1.offset()),
                    momentum,
                };
                Ok(stats_gpu(cuda::stats(
                    xs,
                    xl.offset(),
                    spec,
                    Some(running),
                )?))
            },
        )?,
        None => dispatch(
            OP,
            [x],
            |[x]| Ok(stats(cpu::stats(part(x), spec, None)?)),
            |[(xs, xl)]| Ok(stats_gpu(cuda::stats(xs, xl.offset(), spec, None)?)),
        )?,
    };
    let mean = Tensor::from_storage(mean, &[spec.channels])?;
    let rstd = Tensor::from_storage(rstd, &[spec.channels])?;
    if let (None, Some((rm, rv))) = (in_place, running) {
        update_running(rm, rv, &mean, &rstd, spec, momentum)?;
    }
    Ok((mean, rstd))
}

/// The running update by tensor ops, for statistics the kernels cannot write in place (another
/// dtype, a strided view): var = 1 / rstd^2 - eps recovers the biased variance.
fn update_running(
    rm: &Tensor,
    rv: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    spec: BatchNormSpec,
    momentum: f64,
) -> Result<()> {
    no_grad(|| {
        let count = spec.count() as f64;
        let var = rstd.square()?.pow_scalar(-1.0)?.add_scalar(-spec.eps)?;
        let unbiased = var.mul_scalar(count / (count - 1.0))?;
        for (running, batch) in [(rm, mean), (rv, &unbiased)] {
            let batch = batch.to_dtype(running.dtype())?;
            running.copy_(
                &running
                    .mul_scalar(1.0 - momentum)?
                    .add(&batch.mul_scalar(momentum)?)?,
            )?;
        }
        Ok(())
    })
}

fn apply(
    x: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    spec: BatchNormSpec,
) -> Result<Tensor> {
    let y: Storage = dispatch_optional(
        OP,
        [Some(x), Some(mean), Some(rstd), w, b],
        |[x, mean, rstd, w, b]| {
            let affine = cpu::Affine {
                mean: part(mean.ok_or_else(missing)?),
                rstd: part(rstd.ok_or_else(missing)?),
                w: w.map(part),
                b: b.map(part),
            };
            Ok(cpu::apply(part(x.ok_or_else(missing)?), affine, spec)?.into())
        },
        |[x, mean, rstd, w, b]| {
            let (xs, xl) = x.ok_or_else(missing)?;
            let affine = cuda::Affine {
                mean: ptr(mean.ok_or_else(missing)?),
                rstd: ptr(rstd.ok_or_else(missing)?),
                w: w.map(ptr),
                b: b.map(ptr),
            };
            Ok(cuda::apply(xs, xl.offset(), affine, spec)?.into())
        },
    )?;
    Tensor::from_storage(y, x.shape())
}

/// [dx, dweight, dbias] as storages, each when `needs` says so.
fn run_backward(
    [x, g, mean, rstd]: [&Tensor; 4],
    [w, b]: [Option<&Tensor>; 2],
    spec: BatchNormSpec,
    batch_stats: bool,
    needs: [bool; 3],
) -> Result<[Option<Storage>; 3]> {
    dispatch_optional(
        OP,
        [Some(x), Some(g), Some(mean), Some(rstd), w, b],
        |[x, g, mean, rstd, w, b]| {
            let inp = cpu::GradInputs {
                x: part(x.ok_or_else(missing)?),
                g: part(g.ok_or_else(missing)?),
                mean: part(mean.ok_or_else(missing)?),
                rstd: part(rstd.ok_or_else(missing)?),
                w: w.map(part),
                b: b.map(part),
            };
            let out = cpu::backward(inp, spec, batch_stats, needs)?;
            Ok([out.dx, out.dweight, out.dbias].map(|s| s.map(Into::into)))
        },
        |[x, g, mean, rstd, w, b]| {
            let x = x.ok_or_else(missing)?;
            let inp = cuda::GradInputs {
                x: ptr(x),
                g: ptr(g.ok_or_else(missing)?),
                mean: ptr(mean.ok_or_else(missing)?),
                rstd: ptr(rstd.ok_or_else(missing)?),
                w: w.map(ptr),
                b: b.map(ptr),
            };
            let out = cuda::backward(inp, x.0, spec, batch_stats, needs)?;
            Ok([out.dx, out.dweight, out.dbias].map(|s| s.map(Into::into)))
        },
    )
}

#[cfg(test)]
#[path = "batch_norm_tests.rs"]
mod tests;
