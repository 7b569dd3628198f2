//! layer_norm and rms_norm over the trailing dims that the weight (or bias) covers, or over the
//! last dim without one. Each is one node whose fused backward gives dx, dweight and dbias.
//! Statistics run in FP32 (F64 for F64 inputs); the output keeps the input's dtype and each
//! parameter's gradient keeps that parameter's dtype, so a BF16 input may use an F32 weight.

use super::backward_fn;
use super::dispatch::{dispatch_optional, CpuOperand, CudaOperand};
use crate::autograd::{no_grad, SavedTensor};
use crate::backend::cpu::norm::{self as cpu, Part};
use crate::backend::cuda::norm as cuda;
use crate::backend::spec::NormSpec;
use crate::backend::Storage;
use crate::{DType, Device, Error, Result, Tensor};

impl Tensor {
    /// (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance, over the trailing
    /// dims of the weight's (or bias's) shape, or the last dim when both are absent; as
    /// torch.nn.functional.layer_norm with normalized_shape = weight.shape.
    pub fn layer_norm(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        norm(self, weight, bias, eps, false, self.dtype())
    }

    /// x / sqrt(mean(x^2) + eps) * weight over the trailing dims of the weight's shape (the last
    /// dim without a weight), as torch.nn.functional.rms_norm.
    pub fn rms_norm(&self, weight: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        norm(self, weight, None, eps, true, self.dtype())
    }

    /// `rms_norm(weight, eps)` written in `dtype`: the values of `rms_norm(..)?.to_dtype(dtype)`
    /// as one node. On CUDA, F32 rows written as BF16/F16 (the cast a mixed-precision layer
    /// makes before its products) take one pass, and the backward reads the gradient the
    /// products return in that dtype, so neither direction runs a separate cast.
    pub fn rms_norm_as(&self, weight: Option<&Tensor>, eps: f64, dtype: DType) -> Result<Tensor> {
        if !dtype.is_float() {
            return Err(Error::invalid(
                "rms_norm",
                format!("the output dtype must be a float, got {dtype:?}"),
            ));
        }
        norm(self, weight, None, eps, true, dtype)
    }
}

fn op_name(rms: bool) -> &'static str {
    if rms {
        "rms_norm"
    } else {
        "layer_norm"
    }
}

/// The normalized shape (from the parameters, or the last dim) after checking it against `x`.
fn normalized_shape(
    op: &'static str,
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
) -> Result<Vec<usize>> {
    if let (Some(w), Some(b)) = (weight, bias) {
        if w.shape() != b.shape() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: w.shape().to_vec(),
                rhs: b.shape().to_vec(),
            });
        }
    }
    if x.rank() == 0 {
        return Err(Error::invalid(op, "needs an input with at least one dim"));
    }
    let shape = match weight.or(bias) {
        Some(p) if p.rank() == 0 => {
            return Err(Error::invalid(
                op,
                "the weight and bias need at least one dim",
            ))
        }
        Some(p) => p.shape().to_vec(),
        None => vec![x.shape()[x.rank() - 1]],
    };
    let r = x.rank();
    if r < shape.len() || x.shape()[r - shape.len()..] != shape[..] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: x.shape().to_vec(),
            rhs: shape,
        });
    }
    Ok(shape)
}

/// The forward's output and saved statistics, as tensors.
struct Forward {
    y: Tensor,
    mean: Tensor,
    rstd: Tensor,
}

/// The forward, with y in dtype `out` (converted by the CUDA kernel itself where it can).
fn run_forward(
    x: &Tensor,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    spec: NormSpec,
    out: DType,
) -> Result<Forward> {
    let (y, mean, rstd): (Storage, Storage, Storage) = dispatch_optional(
        op_name(spec.rms),
        [Some(x), w, b],
        |[x, w, b]| {
            let x = x.map(part).ok_or_else(missing_input)?;
            let out = cpu::norm_forward(x, w.map(part), b.map(part), spec)?;
            Ok((out.y.into(), out.mean.into(), out.rstd.into()))
        },
        |[x, w, b]| {
            let ptr = |(s, l): CudaOperand<'_>| s.ptr_at(l.offset());
            let (xs, xl) = x.ok_or_else(missing_input)?;
            let out = cuda::norm_forward(xs, xl.offset(), None, w.map(ptr), b.map(ptr), spec, out)?;
            Ok((out.y.into(), out.mean.into(), out.rstd.into()))
        },
    )?;
    let y = Tensor::from_storage(y, x.shape())?;
    Ok(Forward {
        y: no_grad(|| y.to_dtype(out))?,
        mean: Tensor::from_storage(mean, &[spec.rows])?,
        rstd: Tensor::from_storage(rstd, &[spec.rows])?,
    })
}

/// A CPU operand as the norm kernels read it: its storage from the layout's offset.
fn part((s, l): CpuOperand<'_>) -> Part<'_> {
    Part::new(s, l.offset())
}

/// The input is always given; its absence would be a bug in this file, reported as an error.
fn missing_input() -> Error {
    Error::invalid("norm", "the input operand is missing")
}

/// Gradients as storages: dx (x's dtype), dweight and dbias (compute dtype).
type Grads = (Option<Storage>, Option<Storage>, Option<Storage>);

fn run_backward(
    x: &Tensor,
    g: &Tensor,
    w: Option<&Tensor>,
    mean: &Tensor,
    rstd: &Tensor,
    spec: NormSpec,
    needs: [bool; 3],
) -> Result<Grads> {
    dispatch_optional(
        op_name(spec.rms),
        [Some(x), Some(g), w, Some(mean), Some(rstd)],
        |[x, g, w, mean, rstd]| {
            let (Some(x), Some(g), Some((mean, _)), Some((rstd, _))) = (x, g, mean, rstd) else {
                return Err(missing_input());
            };
            let out = cpu::norm_backward(part(x), part(g), w.map(part), mean, rstd, spec, needs)?;
            Ok((
                out.dx.map(Into::into),
                out.dweight.map(Into::into),
                out.dbias.map(Into::into),
            ))
        },
        |[x, g, w, mean, rstd]| {
            let ptr = |(s, l): CudaOperand<'_>| s.ptr_at(l.offset());
            let (Some(x), Some(g), Some((mean, _)), Some((rstd, _))) = (x, g, mean, rstd) else {
                return Err(missing_input());
            };
            let inputs = cuda::BackwardInputs {
                x: ptr(x),
                g: ptr(g),
                g_dtype: g.0.dtype(),
                w: w.map(ptr),
                mean,
                rstd,
                dsum: None,
                addend_grad: false,
            };
            let out = cuda::norm_backward(inputs, x.0, spec, needs)?;
            Ok((
                out.dx.map(Into::into),
                out.dweight.map(Into::into),
                out.dbias.map(Into::into),
            ))
        },
    )
}

fn norm(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
    rms: bool,
    out: DType,
) -> Result<Tensor> {
    let op = op_name(rms);
    x.check_float(op)?;
    for p in weight.iter().chain(bias.iter()) {
        p.check_float(op)?;
        x.check_same_device(op, p)?;
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(
            op,
            format!("eps must be finite and >= 0, got {eps}"),
        ));
    }
    let shape = normalized_shape(op, x, weight, bias)?;
    let cols: usize = shape.iter().product();
    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    if x.numel() == 0 {
        // Nothing to normalize; gradients of the parameters are zeros.
        let out = Tensor::zeros(x.shape(), out, x.device())?;
        let saved: Vec<Tensor> = inputs.iter().map(|t| t.detach()).collect();
        return Ok(out.recorded(&inputs, move || {
            backward_fn(op, move |_, needs| {
                saved
                    .iter()
                    .zip(needs)
                    .map(|(t, &n)| super::grad_if(n, || Tensor::zeros_like(t)))
                    .collect()
            })
        }));
    }
    let spec = NormSpec {
        rows: x.numel() / cols,
        cols,
        eps,
        rms,
    };
    let cdt = x.dtype().compute_dtype();
    let (xc, wc, bc) = no_grad(|| -> Result<_> {
        let param = |p: Option<&Tensor>| -> Result<Option<Tensor>> {
            p.map(|t| t.to_dtype(cdt)?.contiguous()).transpose()
        };
        Ok((x.contiguous()?, param(weight)?, param(bias)?))
    })?;
    let fwd = run_forward(&xc, wc.as_ref(), bc.as_ref(), spec, out)?;
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    let param_dtypes = (weight.map(|t| t.dtype()), bias.map(|t| t.dtype()));
    Ok(fwd.y.recorded(&inputs, move || {
        let saved_x = SavedTensor::new(op, &xc);
        let saved_w = wc.as_ref().map(|w| SavedTensor::new(op, w));
        let (mean, rstd) = (fwd.mean, fwd.rstd);
        backward_fn(op, move |g, needs| {
            let x = saved_x.get()?;
            let w = saved_w.as_ref().map(|s| s.get()).transpose()?;
            // CUDA's kernels read a BF16/F16 gradient of F32 rows as it is.
            let read_as_is = matches!(g.device(), Device::Cuda(_))
                && cuda::converts_in_kernel(x.dtype(), g.dtype());
            let gc = if read_as_is {
                g.clone()
            } else {
                g.to_dtype(x.dtype())?
            }
            .contiguous()?;
            let need_w = has_w && needs[1];
            let need_b = has_b && needs[1 + has_w as usize];
            let (dx, dw, db) =
                run_backward(x, &gc, w, &mean, &rstd, spec, [needs[0], need_w, need_b])?;
            let param_grad = |s: Option<Storage>, dtype: Option<DType>| -> Result<Option<Tensor>> {
                match (s, dtype) {
                    (Some(s), Some(d)) => Ok(Some(Tensor::from_storage(s, &shape)?.to_dtype(d)?)),
                    _ => Ok(None),
                }
            };
            let mut grads = vec![dx.map(|s| Tensor::from_storage(s, x.shape())).transpose()?];
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Device, Generator};

    fn randn(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
        Tensor::randn(shape, dtype, Some(&mut Generator::new(seed))).unwrap()
    }

    /// The composite formula the fused op replaces, in F64.
    fn reference(
        x: &Tensor,
        w: Option<&Tensor>,
        b: Option<&Tensor>,
        dims: &[isize],
        rms: bool,
    ) -> Tensor {
        let x = x.to_dtype(DType::F64).unwrap();
        let y = if rms {
            let ms = x.square().unwrap().mean_dims(dims, true).unwrap();
            x.mul(&ms.add_scalar(1e-5).unwrap().rsqrt().unwrap())
                .unwrap()
        } else {
            let mean = x.mean_dims(dims, true).unwrap();
            let var = x.var_dims(dims, false, true).unwrap();
            x.sub(&mean)
                .unwrap()
                .mul(&var.add_scalar(1e-5).unwrap().rsqrt().unwrap())
                .unwrap()
        };
        let y = match w {
            Some(w) => y.mul(&w.to_dtype(DType::F64).unwrap()).unwrap(),
            None => y,
        };
        match b {
            Some(b) => y.add(&b.to_dtype(DType::F64).unwrap()).unwrap(),
            None => y,
        }
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        let (a, b) = (a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    }

    #[test]
    fn layer_norm_over_two_trailing_dims_matches_the_composite_formula() {
        let x = randn(&[3, 2, 5], 1, DType::F32);
        let w = randn(&[2, 5], 2, DType::F32);
        let b = randn(&[2, 5], 3, DType::F32);
        let got = x.layer_norm(Some(&w), Some(&b), 1e-5).unwrap();
        assert_eq!(got.dtype(), DType::F32);
        assert!(max_diff(&got, &reference(&x, Some(&w), Some(&b), &[-2, -1], false)) < 1e-5);
        let plain = x.layer_norm(None, None, 1e-5).unwrap();
        assert!(max_diff(&plain, &reference(&x, None, None, &[-1], false)) < 1e-5);
        let w5 = randn(&[5], 4, DType::F32);
        let r = x.rms_norm(Some(&w5), 1e-5).unwrap();
        assert!(max_diff(&r, &reference(&x, Some(&w5), None, &[-1], true)) < 1e-5);
    }

    #[test]
    fn bf16_input_with_f32_weight_keeps_each_dtype() {
        let x = randn(&[4, 8], 5, DType::F32).to_dtype(DType::BF16).unwrap();
        let w = randn(&[8], 6, DType::F32).requires_grad_().unwrap();
        let y = x.rms_norm(Some(&w), 1e-5).unwrap();
        assert_eq!(y.dtype(), DType::BF16);
        assert!(max_diff(&y, &reference(&x, Some(&w), None, &[-1], true)) < 2e-2);
        y.sum().unwrap().backward().unwrap();
        assert_eq!(w.grad().unwrap().dtype(), DType::F32);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let x = randn(&[3, 4], 7, DType::F32);
        assert!(x
            .layer_norm(Some(&randn(&[3], 8, DType::F32)), None, 1e-5)
            .is_err());
        assert!(x
            .layer_norm(
                Some(&randn(&[4], 8, DType::F32)),
                Some(&randn(&[2, 2], 9, DType::F32)),
                1e-5
            )
            .is_err());
        assert!(Tensor::scalar(1.0, DType::F32)
            .unwrap()
            .rms_norm(None, 1e-5)
            .is_err());
        let empty = Tensor::zeros(&[0, 4], DType::F32, Device::Cpu).unwrap();
        assert_eq!(empty.layer_norm(None, None, 1e-5).unwrap().shape(), &[0, 4]);
    }

    /// Forward and all three gradients on CUDA against the CPU kernels, for F32 and for a BF16
    /// input with F32 parameters; rows long enough for several threads per row and enough rows
    /// for several chunks in the column reduction.
    #[test]
    fn cuda_norms_match_cpu_forward_and_backward() {
        let Some(dev) =
            crate::backend::cuda::device_for_test("cuda_norms_match_cpu_forward_and_backward")
        else {
            return;
        };
        for (dtype, tol) in [(DType::F32, 1e-4), (DType::BF16, 3e-2)] {
            for rms in [false, true] {
                for (rows, cols) in [(7, 33), (300, 1500)] {
                    let x = randn(&[rows, cols], 10, DType::F32)
                        .to_dtype(dtype)
                        .unwrap();
                    let w = randn(&[cols], 11, DType::F32);
                    let b = randn(&[cols], 12, DType::F32);
                    let gy = randn(&[rows, cols], 13, DType::F32)
                        .to_dtype(dtype)
                        .unwrap();
                    let run = |device: Device| {
                        let x = x
                            .to_device(device)
                            .unwrap()
                            .detach()
                            .requires_grad_()
                            .unwrap();
                        let w = w
                            .to_device(device)
                            .unwrap()
                            .detach()
                            .requires_grad_()
                            .unwrap();
                        let b = b
                            .to_device(device)
                            .unwrap()
                            .detach()
                            .requires_grad_()
                            .unwrap();
                        let y = if rms {
                            x.rms_norm(Some(&w), 1e-5).unwrap()
                        } else {
                            x.layer_norm(Some(&w), Some(&b), 1e-5).unwrap()
                        };
                        assert_eq!(y.device(), device);
                        y.mul(&gy.to_device(device).unwrap())
                            .unwrap()
                            .sum()
                            .unwrap()
                            .backward()
                            .unwrap();
                        let mut out = vec![y, x.grad().unwrap(), w.grad().unwrap()];
                        if !rms {
                            out.push(b.grad().unwrap());
                        }
                        out
                    };
                    let (c, g) = (run(Device::Cpu), run(dev));
                    for (i, (a, b)) in c.iter().zip(&g).enumerate() {
                        let scale = a.abs().unwrap().max().unwrap().item().unwrap().max(1.0);
                        let d = max_diff(a, b);
                        assert!(d <= tol * scale, "{dtype:?} rms={rms} {rows}x{cols} output {i}: diff {d} (scale {scale})");
                    }
                }
            }
        }
    }

    #[test]
    fn rms_norm_as_gives_the_norm_cast_and_its_gradient() {
        let x = randn(&[6, 16], 21, DType::F32).requires_grad_().unwrap();
        let w = randn(&[16], 22, DType::F32).requires_grad_().unwrap();
        let probe = randn(&[6, 16], 23, DType::BF16);
        let y = x.rms_norm_as(Some(&w), 1e-5, DType::BF16).unwrap();
        let expected = no_grad(|| x.rms_norm(Some(&w), 1e-5)?.to_dtype(DType::BF16)).unwrap();
        assert_eq!(y.dtype(), DType::BF16);
        assert_eq!(max_diff(&y, &expected), 0.0);
        y.mul(&probe).unwrap().sum().unwrap().backward().unwrap();
        let (gx, gw) = (x.grad().unwrap(), w.grad().unwrap());
        let (x2, w2) = (
            x.detach().requires_grad_().unwrap(),
            w.detach().requires_grad_().unwrap(),
        );
        let y2 = x2
            .rms_norm(Some(&w2), 1e-5)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        y2.mul(&probe).unwrap().sum().unwrap().backward().unwrap();
        assert_eq!(gx.dtype(), DType::F32);
        assert_eq!(max_diff(&gx, &x2.grad().unwrap()), 0.0);
        assert_eq!(max_diff(&gw, &w2.grad().unwrap()), 0.0);
    }

    #[test]
    fn rms_norm_as_an_integer_dtype_is_an_error() {
        let x = randn(&[2, 4], 24, DType::F32);
        let err = x.rms_norm_as(None, 1e-5, DType::I64).unwrap_err();
        assert!(err.to_string().contains("must be a float"), "{err}");
    }
}
