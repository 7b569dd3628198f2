//! Losses. cross_entropy is one fused node (kernels in backend/{cpu,cuda}/loss.rs); the others
//! are composed from differentiable ops, so their gradients come from autograd.

use super::backward_fn;
use super::dispatch::dispatch;
use crate::autograd::SavedTensor;
use crate::backend::cpu::loss as cpu;
use crate::backend::cpu::norm::Part;
use crate::backend::cuda::loss as cuda;
use crate::backend::spec::CrossEntropySpec;
use crate::backend::Storage;
use crate::{DType, Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    #[default]
    Mean,
    Sum,
    None,
}

impl Reduction {
    pub fn parse(name: &str) -> Option<Reduction> {
        match name {
            "mean" => Some(Reduction::Mean),
            "sum" => Some(Reduction::Sum),
            "none" => Some(Reduction::None),
            _ => None,
        }
    }

    fn apply(self, per_item: Tensor) -> Result<Tensor> {
        match self {
            Reduction::Mean => per_item.mean(),
            Reduction::Sum => per_item.sum(),
            Reduction::None => Ok(per_item),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyOptions {
    /// Targets equal to this are skipped and do not count toward the mean.
    pub ignore_index: Option<i64>,
    pub label_smoothing: f64,
    pub reduction: Reduction,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        CrossEntropyOptions {
            ignore_index: Some(-100),
            label_smoothing: 0.0,
            reduction: Reduction::Mean,
        }
    }
}

fn check_same_shape(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.shape() != b.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        });
    }
    Ok(())
}

/// Logits [N, C] (or [N, C, d..] with the class dim second, or [C]) against integer class
/// targets [N] (or [N, d..], or a scalar), as torch.nn.functional.cross_entropy. One fused node
/// on either device computes each row's loss in FP32 (F64 for F64 logits), so BF16 logits give
/// an F32 loss, as under PyTorch's autocast. A target out of range is an error: at once on the
/// CPU, at the next host read on CUDA (the device flags it instead of a sync per call).
pub fn cross_entropy(
    logits: &Tensor,
    targets: &Tensor,
    opts: CrossEntropyOptions,
) -> Result<Tensor> {
    logits.check_float("cross_entropy")?;
    logits.check_same_device("cross_entropy", targets)?;
    if !(0.0..=1.0).contains(&opts.label_smoothing) {
        return Err(Error::invalid(
            "cross_entropy",
            format!(
                "label_smoothing must be in [0, 1], got {}",
                opts.label_smoothing
            ),
        ));
    }
    if targets.dtype().is_float() {
        return cross_entropy_with_probabilities(logits, targets, &opts);
    }
    // Bring the class dim last and flatten to [rows, C].
    let (flat, t) = match logits.rank() {
        0 => {
            return Err(Error::invalid(
                "cross_entropy",
                "logits need a class dimension",
            ))
        }
        1 => (logits.unsqueeze(0)?, targets.reshape_to(&[1])?),
        2 => (logits.clone(), targets.clone()),
        r => {
            let mut perm: Vec<isize> = (0..r as isize).filter(|&d| d != 1).collect();
            perm.push(1);
            let moved = logits.permute(&perm)?;
            let c = logits.shape()[1];
            (
                moved.reshape_to(&[moved.numel() / c.max(1), c])?,
                targets.flatten()?,
            )
        }
    };
    let (rows, classes) = (flat.shape()[0], flat.shape()[1]);
    let expected: Vec<usize> = match logits.rank() {
        1 => vec![],
        _ => logits
            .shape()
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != 1)
            .map(|(_, &d)| d)
            .collect(),
    };
    if targets.shape() != expected.as_slice() || t.numel() != rows {
        return Err(Error::ShapeMismatch {
            op: "cross_entropy",
            lhs: logits.shape().to_vec(),
            rhs: targets.shape().to_vec(),
        });
    }
    let t = crate::autograd::no_grad(|| t.to_dtype(DType::I64)?.contiguous())?;
    let spec = CrossEntropySpec {
        rows,
        cols: classes,
        ignore: opts.ignore_index.unwrap_or(i64::MIN),
        smoothing: opts.label_smoothing,
    };
    if logits.device() == crate::Device::Cpu {
        if let Some(bad) = t
            .to_vec::<i64>()?
            .into_iter()
            .find(|&v| v != spec.ignore && (v < 0 || v as u64 >= classes as u64))
        {
            return Err(Error::IndexOutOfRange {
                op: "cross_entropy",
                index: bad,
                size: classes,
            });
        }
    }
    let (per_row, valid) = fused_rows(&flat, &t, spec)?;
    match opts.reduction {
        // The mean counts only rows that are not ignored, as in PyTorch.
        Reduction::Mean => per_row.sum()?.div(&valid.sum()?),
        Reduction::Sum => per_row.sum(),
        Reduction::None => per_row.reshape_to(&expected),
    }
}

/// PyTorch's cross-entropy against class probabilities (targets of the logits' shape, float:
/// mixup's and cutmix's soft labels): -sum(p · log_softmax(x)) over the class dim (1, or 0 for
/// one row), with label smoothing mixing each row toward the uniform distribution; the mean is
/// over every row (ignore_index does not apply), computed in F32 for half-precision logits.
fn cross_entropy_with_probabilities(
    logits: &Tensor,
    targets: &Tensor,
    opts: &CrossEntropyOptions,
) -> Result<Tensor> {
    if targets.shape() != logits.shape() {
        return Err(Error::invalid(
            "cross_entropy",
            format!(
                "float targets are class probabilities and need the logits' shape {:?}, got {:?} (class ids are integers)",
                logits.shape(),
                targets.shape()
            ),
        ));
    }
    let class_dim: isize = if logits.rank() == 1 { 0 } else { 1 };
    let classes = logits.shape()[class_dim as usize];
    let dtype = match logits.dtype() {
        DType::BF16 | DType::F16 => DType::F32,
        d => d,
    };
    let mut p = targets.to_dtype(dtype)?;
    if opts.label_smoothing > 0.0 {
        let eps = opts.label_smoothing;
        p = p
            .mul_scalar(1.0 - eps)?
            .add_scalar(eps / classes.max(1) as f64)?;
    }
    let log_p = logits.to_dtype(dtype)?.log_softmax(class_dim)?;
    let per_row = p.mul(&log_p)?.sum_dims(&[class_dim], false)?.neg()?;
    match opts.reduction {
        Reduction::Mean => per_row.mean(),
        Reduction::Sum => per_row.sum(),
        Reduction::None => Ok(per_row),
    }
}

/// Each row's loss (recorded, with a fused backward into `flat`) and 1/0 for the rows that
/// count toward the mean, both [rows] in the compute dtype. `t` is contiguous I64 on `flat`'s
/// device.
fn fused_rows(flat: &Tensor, t: &Tensor, spec: CrossEntropySpec) -> Result<(Tensor, Tensor)> {
    let op = "cross_entropy";
    let x = crate::autograd::no_grad(|| flat.contiguous())?;
    let (loss, lse, valid): (Storage, Storage, Storage) = dispatch(
        op,
        [&x, t],
        |[(xs, xl), (ts, tl)]| {
            let tv = Part::new(ts, tl.offset()).slice_of::<i64>(spec.rows, op)?;
            let out = cpu::cross_entropy_forward(Part::new(xs, xl.offset()), tv, spec)?;
            Ok((out.loss.into(), out.lse.into(), out.valid.into()))
        },
        |[(xs, xl), (ts, tl)]| {
            let out = cuda::cross_entropy_forward(xs, xl.offset(), ts.ptr_at(tl.offset()), spec)?;
            Ok((out.loss.into(), out.lse.into(), out.valid.into()))
        },
    )?;
    let shape = [spec.rows];
    let (loss, lse) = (
        Tensor::from_storage(loss, &shape)?,
        Tensor::from_storage(lse, &shape)?,
    );
    let valid = Tensor::from_storage(valid, &shape)?;
    let loss = loss.recorded(&[flat], || {
        let (saved_x, saved_t) = (SavedTensor::new(op, &x), SavedTensor::new(op, t));
        backward_fn(op, move |g, _| {
            let (x, t) = (saved_x.get()?, saved_t.get()?);
            let g = g.to_dtype(lse.dtype())?.contiguous()?;
            let dx: Storage = dispatch(
                op,
                [x, t, &lse, &g],
                |[(xs, xl), (ts, tl), (ls, _), (gs, gl)]| {
                    let tv = Part::new(ts, tl.offset()).slice_of::<i64>(spec.rows, op)?;
                    let (x, g) = (Part::new(xs, xl.offset()), Part::new(gs, gl.offset()));
                    Ok(cpu::cross_entropy_backward(x, tv, ls, g, spec)?.into())
                },
                |[(xs, xl), (ts, tl), (ls, _), (gs, gl)]| {
                    let (pt, pg) = (ts.ptr_at(tl.offset()), gs.ptr_at(gl.offset()));
                    let dx = cuda::cross_entropy_backward(xs, xl.offset(), pt, ls, pg, spec);
                    Ok(dx?.into())
                },
            )?;
            Ok(vec![Some(Tensor::from_storage(dx, x.shape())?)])
        })
    });
    Ok((loss, valid))
}

/// Binary cross-entropy on logits: softplus(x) - x*y, written on each side of 0 so that no
/// large terms cancel: x - x*y + softplus(-x) for x >= 0, softplus(x) - x*y below. Both sides
/// are smooth with derivative sigmoid(x) - y, so the gradient is exact everywhere, 0 included
/// (max(x, 0) + log(1 + exp(-|x|)) has kinks there that gave -y instead of 0.5 - y).
pub fn bce_with_logits(logits: &Tensor, targets: &Tensor, reduction: Reduction) -> Result<Tensor> {
    logits.check_float("bce_with_logits")?;
    check_same_shape("bce_with_logits", logits, targets)?;
    let x = logits;
    let xy = x.mul(&targets.to_dtype(x.dtype())?)?;
    let positive = x.sub(&xy)?.add(&x.neg()?.softplus()?)?;
    let negative = x.softplus()?.sub(&xy)?;
    let per = Tensor::where_cond(&x.ge_scalar(0.0)?, &positive, &negative)?;
    reduction.apply(per)
}

pub fn mse_loss(pred: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    check_same_shape("mse_loss", pred, target)?;
    reduction.apply(pred.sub(target)?.square()?)
}

/// Quadratic below `delta`, linear above, as torch.nn.HuberLoss.
pub fn huber_loss(
    pred: &Tensor,
    target: &Tensor,
    delta: f64,
    reduction: Reduction,
) -> Result<Tensor> {
    check_same_shape("huber_loss", pred, target)?;
    if delta <= 0.0 {
        return Err(Error::invalid(
            "huber_loss",
            format!("delta must be positive, got {delta}"),
        ));
    }
    let d = pred.sub(target)?;
    let a = d.abs()?;
    let quad = d.square()?.affine(0.5, 0.0)?;
    let lin = a.affine(delta, -0.5 * delta * delta)?;
    reduction.apply(Tensor::where_cond(&a.lt_scalar(delta)?, &quad, &lin)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Device, Generator};

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        let (a, b) = (a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    }

    #[test]
    fn bce_with_logits_is_exact_at_zero_and_for_confident_logits() {
        let x = Tensor::from_vec(vec![0.0f64, 0.0, 15.0, -15.0, 40.0, -40.0], &[6])
            .unwrap()
            .requires_grad_()
            .unwrap();
        let y = Tensor::from_vec(vec![0.0f64, 1.0, 1.0, 0.0, 0.0, 1.0], &[6]).unwrap();
        let loss = bce_with_logits(&x, &y, Reduction::None).unwrap();
        let sum = loss.sum().unwrap();
        sum.backward().unwrap();
        let (l, g) = (
            loss.to_vec_f64().unwrap(),
            x.grad().unwrap().to_vec_f64().unwrap(),
        );
        let tiny = (-15f64).exp().ln_1p();
        let want = [
            std::f64::consts::LN_2,
            std::f64::consts::LN_2,
            tiny,
            tiny,
            40.0,
            40.0,
        ];
        for (i, (got, want)) in l.iter().zip(want).enumerate() {
            assert!(
                (got - want).abs() <= 1e-15 * want.max(1.0),
                "loss {i}: {got} vs {want}"
            );
        }
        // d/dx = sigmoid(x) - y: 0.5 - y at 0.
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        let want = [0.5, -0.5, sig(15.0) - 1.0, sig(-15.0), 1.0, -1.0];
        for (i, (got, want)) in g.iter().zip(want).enumerate() {
            assert!((got - want).abs() < 1e-12, "gradient {i}: {got} vs {want}");
        }
    }

    #[test]
    fn bf16_logits_give_an_f32_loss_and_bf16_gradients() {
        let logits = Tensor::randn(&[4, 7], DType::F32, Some(&mut Generator::new(1)))
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
            .requires_grad_()
            .unwrap();
        let targets = Tensor::from_vec(vec![0i64, 6, -100, 3], &[4]).unwrap();
        let loss = cross_entropy(&logits, &targets, CrossEntropyOptions::default()).unwrap();
        assert_eq!(loss.dtype(), DType::F32);
        let exact = cross_entropy(
            &logits.to_dtype(DType::F64).unwrap().detach(),
            &targets,
            CrossEntropyOptions::default(),
        )
        .unwrap();
        assert!((loss.item().unwrap() - exact.item().unwrap()).abs() < 1e-6);
        loss.backward().unwrap();
        let g = logits.grad().unwrap();
        assert_eq!(g.dtype(), DType::BF16);
        // The ignored row gets no gradient.
        assert!(g.to_vec_f64().unwrap()[14..21].iter().all(|&v| v == 0.0));
    }

    /// Loss and logits gradient on CUDA against the CPU kernels for every reduction, with
    /// ignored rows and label smoothing, in F32 and BF16; then a bad target is reported at the
    /// next read, not as a wrong number.
    #[test]
    fn cuda_cross_entropy_matches_cpu_and_flags_bad_targets() {
        let Some(dev) = crate::backend::cuda::device_for_test(
            "cuda_cross_entropy_matches_cpu_and_flags_bad_targets",
        ) else {
            return;
        };
        let (rows, classes) = (37, 1000);
        let logits = Tensor::randn(&[rows, classes], DType::F32, Some(&mut Generator::new(3)))
            .unwrap()
            .affine(3.0, 0.0)
            .unwrap();
        let mut t = Tensor::randint(0, classes as i64, &[rows], Some(&mut Generator::new(4)))
            .unwrap()
            .to_vec::<i64>()
            .unwrap();
        t[5] = -100;
        t[20] = -100;
        let targets = Tensor::from_vec(t, &[rows]).unwrap();
        // Gradients lie in [-1, 1]; BF16 ones may differ by one ulp (2^-8 near 1).
        for (dtype, tol) in [(DType::F32, 1e-6), (DType::BF16, 8e-3)] {
            for label_smoothing in [0.0, 0.1] {
                for reduction in [Reduction::Mean, Reduction::Sum, Reduction::None] {
                    let opts = CrossEntropyOptions {
                        label_smoothing,
                        reduction,
                        ..Default::default()
                    };
                    let run = |device: Device| {
                        let x = logits
                            .to_dtype(dtype)
                            .unwrap()
                            .detach()
                            .to_device(device)
                            .unwrap()
                            .requires_grad_()
                            .unwrap();
                        let tg = targets.to_device(device).unwrap();
                        let loss = cross_entropy(&x, &tg, opts).unwrap();
                        assert_eq!(loss.device(), device);
                        loss.sum().unwrap().backward().unwrap();
                        (loss, x.grad().unwrap())
                    };
                    let ((lc, gc), (lg, gg)) = (run(Device::Cpu), run(dev));
                    let what = format!("{dtype:?} smoothing {label_smoothing} {reduction:?}");
                    let scale = lc.abs().unwrap().max().unwrap().item().unwrap().max(1.0);
                    assert!(max_diff(&lc, &lg) <= 1e-5 * scale, "{what}: loss");
                    assert!(max_diff(&gc, &gg) <= tol, "{what}: gradient");
                }
            }
        }
        let bad = Tensor::from_vec(vec![1i64, classes as i64], &[2])
            .unwrap()
            .to_device(dev)
            .unwrap();
        let x = logits.narrow(0, 0, 2).unwrap().to_device(dev).unwrap();
        let loss = cross_entropy(&x, &bad, CrossEntropyOptions::default()).unwrap();
        let err = loss.item().unwrap_err().to_string();
        assert!(err.contains("cross_entropy"), "{err}");
        // The flag was cleared by the read that reported it.
        let good = Tensor::from_vec(vec![1i64, 2], &[2])
            .unwrap()
            .to_device(dev)
            .unwrap();
        assert!(cross_entropy(&x, &good, CrossEntropyOptions::default())
            .unwrap()
            .item()
            .unwrap()
            .is_finite());
    }
}
