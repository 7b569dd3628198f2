//! BatchNorm over contiguous [outer, channels, inner] tensors: per-channel statistics (with the
//! running statistics updated in place), normalize and affine, and the backward. Sums run in
//! f64 per channel, channels in parallel; the rest computes in f32 (f64 for F64), as the CUDA
//! kernels do, with the same formulas.

use super::map::PARALLEL_MIN;
use super::norm::{Conv, Part};
use super::{CpuStorage, IntoCpuStorage};
use crate::spec::unary::sigmoid;
use crate::spec::{BatchNormSpec, NormAct, Real};
use crate::{DType, Error, Result, WithDType};
use half::{bf16, f16};
use rayon::prelude::*;

const OP: &str = "batch_norm";

/// The running statistics to update in place (`channels` values of the compute dtype each),
/// with the weight of this batch.
pub struct RunningStats<'a> {
    pub mean: &'a mut CpuStorage,
    pub var: &'a mut CpuStorage,
    pub momentum: f64,
}

/// Per-channel mean and 1 / sqrt(var + eps), in the compute dtype.
pub struct Stats {
    pub mean: CpuStorage,
    pub rstd: CpuStorage,
}

pub struct Grads {
    pub dx: Option<CpuStorage>,
    pub dweight: Option<CpuStorage>,
    pub dbias: Option<CpuStorage>,
}

/// `f(c)` for each channel, in parallel when the tensor is large enough to pay for it.
fn per_channel<U: Send>(spec: BatchNormSpec, f: impl Fn(usize) -> U + Sync + Send) -> Vec<U> {
    if spec.numel() < PARALLEL_MIN {
        (0..spec.channels).map(f).collect()
    } else {
        (0..spec.channels).into_par_iter().map(f).collect()
    }
}

/// Channel c's values, plane by plane.
fn channel<T: Copy>(x: &[T], spec: BatchNormSpec, c: usize) -> impl Iterator<Item = T> + '_ {
    (0..spec.outer).flat_map(move |n| {
        let at = (n * spec.channels + c) * spec.inner;
        x[at..at + spec.inner].iter().copied()
    })
}

/// Fills `out` plane by plane with `f(channel, x_plane_offset, out_plane)`.
fn fill_planes<T: Send>(
    out: &mut [T],
    spec: BatchNormSpec,
    f: impl Fn(usize, usize, &mut [T]) + Sync + Send,
) {
    let run = |(p, plane): (usize, &mut [T])| f(p % spec.channels, p * spec.inner, plane);
    if spec.inner == 0 {
        return;
    }
    if out.len() < PARALLEL_MIN {
        out.chunks_mut(spec.inner).enumerate().for_each(run);
    } else {
        out.par_chunks_mut(spec.inner).enumerate().for_each(run);
    }
}

fn stats_t<T: WithDType, R: Real + WithDType>(
    x: &[T],
    spec: BatchNormSpec,
    cv: &Conv<T, R>,
) -> Vec<(f64, f64)> {
    // Two passes (mean, then squared deviations) in f64; returns (mean, biased var).
    let count = spec.count() as f64;
    per_channel(spec, |c| {
        let mean = channel(x, spec, c)
            .map(|v| (cv.to)(v).to_f64())
            .sum::<f64>()
            / count;
        let var = channel(x, spec, c)
            .map(|v| {
                let d = (cv.to)(v).to_f64() - mean;
                d * d
            })
            .sum::<f64>()
            / count;
        (mean, var)
    })
}

fn unsupported(dtype: DType) -> Error {
    Error::UnsupportedDType {
        op: OP,
        dtype,
        detail: ": needs a float tensor".into(),
    }
}

/// Runs `$body` with `$T` the element type of `$dtype` and `$R` its compute type, `$cv` their
/// conversions.
macro_rules! with_float_types {
    ($dtype:expr, |$cv:ident: $T:ident, $R:ident| $body:expr) => {
        match $dtype {
            DType::F64 => {
                type $T = f64;
                type $R = f64;
                let $cv = Conv::<f64, f64> {
                    to: |v| v,
                    from: |v| v,
                };
                $body
            }
            DType::F32 => {
                type $T = f32;
                type $R = f32;
                let $cv = Conv::<f32, f32> {
                    to: |v| v,
                    from: |v| v,
                };
                $body
            }
            DType::BF16 => {
                type $T = bf16;
                type $R = f32;
                let $cv = Conv::<bf16, f32> {
                    to: bf16::to_f32,
                    from: bf16::from_f32,
                };
                $body
            }
            DType::F16 => {
                type $T = f16;
                type $R = f32;
                let $cv = Conv::<f16, f32> {
                    to: f16::to_f32,
                    from: f16::from_f32,
                };
                $body
            }
            other => Err(unsupported(other)),
        }
    };
}

/// Updates `running` (compute dtype R) to (1 - m) * running + m * batch.
fn lerp_into<R: Real + IntoCpuStorage>(
    running: &mut CpuStorage,
    batch: &[f64],
    m: f64,
) -> Result<()> {
    let values = R::slice_mut(running)
        .filter(|v| v.len() == batch.len())
        .ok_or_else(|| {
            Error::invalid(
                OP,
                format!(
                    "running statistics must hold {} {:?} values",
                    batch.len(),
                    R::DTYPE
                ),
            )
        })?;
    for (r, &b) in values.iter_mut().zip(batch) {
        *r = R::from_f64((1.0 - m) * r.to_f64() + m * b);
    }
    Ok(())
}

/// This batch's per-channel statistics of `x` (`spec.numel()` values from its offset), and the
/// running statistics updated when given, with the unbiased variance as PyTorch does.
pub fn stats(x: Part, spec: BatchNormSpec, running: Option<RunningStats>) -> Result<Stats> {
    with_float_types!(x.storage.dtype(), |cv: T, R| {
        let xs = x.slice_of::<T>(spec.numel(), OP)?;
        let s = stats_t::<T, R>(xs, spec, &cv);
        if let Some(r) = running {
            let count = spec.count() as f64;
            let means: Vec<f64> = s.iter().map(|&(m, _)| m).collect();
            let unbiased: Vec<f64> = s.iter().map(|&(_, v)| v * count / (count - 1.0)).collect();
            lerp_into::<R>(r.mean, &means, r.momentum)?;
            lerp_into::<R>(r.var, &unbiased, r.momentum)?;
        }
        let mean: Vec<R> = s.iter().map(|&(m, _)| R::from_f64(m)).collect();
        let rstd: Vec<R> = s
            .iter()
            .map(|&(_, v)| R::from_f64(1.0 / (v + spec.eps).sqrt()))
            .collect();
        Ok(Stats {
            mean: R::into_storage(mean),
            rstd: R::into_storage(rstd),
        })
    })
}

/// Per-channel operands of `apply` (`channels` values of the compute dtype each): the
/// statistics to normalize with, and the affine weight and bias when there are any.
pub struct Affine<'a> {
    pub mean: Part<'a>,
    pub rstd: Part<'a>,
    pub w: Option<Part<'a>>,
    pub b: Option<Part<'a>>,
}

/// y = x * (rstd * w) + (b - mean * rstd * w) per channel (then `spec.act`), in x's dtype.
pub fn apply(x: Part, affine: Affine, spec: BatchNormSpec) -> Result<CpuStorage> {
    with_float_types!(x.storage.dtype(), |cv: T, R| {
        let xs = x.slice_of::<T>(spec.numel(), OP)?;
        let ws = affine
            .w
            .map(|p| p.slice_of::<R>(spec.channels, OP))
            .transpose()?;
        let bs = affine
            .b
            .map(|p| p.slice_of::<R>(spec.channels, OP))
            .transpose()?;
        let mean = affine.mean.slice_of::<R>(spec.channels, OP)?;
        let rstd = affine.rstd.slice_of::<R>(spec.channels, OP)?;
        let mut y = vec![T::zero(); spec.numel()];
        fill_planes(&mut y, spec, |c, at, out| {
            let scale = rstd[c] * ws.map_or(R::c(1.0), |w| w[c]);
            let shift = bs.map_or(R::c(0.0), |b| b[c]) - mean[c] * scale;
            for (o, &v) in out.iter_mut().zip(&xs[at..]) {
                let y = (cv.to)(v) * scale + shift;
                *o = (cv.from)(match spec.act {
                    NormAct::None => y,
                    NormAct::Silu => y * sigmoid(y),
                    NormAct::Relu => {
                        if y > R::c(0.0) {
                            y
                        } else {
                            R::c(0.0)
                        }
                    }
                });
            }
        });
        Ok(T::into_storage(y))
    })
}

/// What the backward reads: `x` and `g` (x's dtype, contiguous), the per-channel `mean` and
/// `rstd` the forward normalized with, and the weight when there is one.
pub struct GradInputs<'a> {
    pub x: Part<'a>,
    pub g: Part<'a>,
    pub mean: Part<'a>,
    pub rstd: Part<'a>,
    pub w: Option<Part<'a>>,
    /// The bias, read when `spec.act` is not `None` (the backward recomputes the norm's output).
    pub b: Option<Part<'a>>,
}

/// The gradients of x (its dtype), the weight and the bias (compute dtype), each when `needs`
/// says so ([dx, dweight, dbias]). `batch_stats`: the forward used the batch's own statistics,
/// so dx also flows through them.
pub fn backward(
    inp: GradInputs,
    spec: BatchNormSpec,
    batch_stats: bool,
    needs: [bool; 3],
) -> Result<Grads> {
    with_float_types!(inp.x.storage.dtype(), |cv: T, R| {
        let n = spec.numel();
        let (x, g) = (inp.x.slice_of::<T>(n, OP)?, inp.g.slice_of::<T>(n, OP)?);
        let mean = inp.mean.slice_of::<R>(spec.channels, OP)?;
        let rstd = inp.rstd.slice_of::<R>(spec.channels, OP)?;
        let w = inp
            .w
            .map(|p| p.slice_of::<R>(spec.channels, OP))
            .transpose()?;
        let b = inp
            .b
            .map(|p| p.slice_of::<R>(spec.channels, OP))
            .transpose()?;
        // The gradient at the norm's output: g, or through the activation at
        // y = x * scale + shift.
        let at_norm = |c: usize, gv: T, xv: T| -> R {
            let gv = (cv.to)(gv);
            if spec.act == NormAct::None {
                return gv;
            }
            let scale = rstd[c] * w.map_or(R::c(1.0), |w| w[c]);
            let shift = b.map_or(R::c(0.0), |b| b[c]) - mean[c] * scale;
            let y = (cv.to)(xv) * scale + shift;
            if spec.act == NormAct::Relu {
                return if y > R::c(0.0) { gv } else { R::c(0.0) };
            }
            let s = sigmoid(y);
            gv * (s * (R::c(1.0) + y * (R::c(1.0) - s)))
        };
        // Per channel: sum(g) and sum(g * (x - mean)), in f64.
        let sums: Vec<(f64, f64)> = per_channel(spec, |c| {
            channel(g, spec, c)
                .zip(channel(x, spec, c))
                .fold((0.0, 0.0), |(sg, sgx), (gv, xv)| {
                    let gn = at_norm(c, gv, xv);
                    (
                        sg + gn.to_f64(),
                        sgx + (gn * ((cv.to)(xv) - mean[c])).to_f64(),
                    )
                })
        });
        let count = spec.count() as f64;
        // dx = k0 * g + k1 * (x - mean) + k2, as the CUDA kernels compute it.
        let k: Vec<[R; 3]> = (0..spec.channels)
            .map(|c| {
                let (sg, sgx) = sums[c];
                let r = rstd[c].to_f64();
                let k0 = w.map_or(1.0, |w| w[c].to_f64()) * r;
                let (k1, k2) = if batch_stats {
                    (-k0 * r * r * sgx / count, -k0 * sg / count)
                } else {
                    (0.0, 0.0)
                };
                [R::from_f64(k0), R::from_f64(k1), R::from_f64(k2)]
            })
            .collect();
        let dx = needs[0].then(|| {
            let mut dx = vec![T::zero(); n];
            fill_planes(&mut dx, spec, |c, at, out| {
                let [k0, k1, k2] = k[c];
                for ((o, &gv), &xv) in out.iter_mut().zip(&g[at..]).zip(&x[at..]) {
                    let gn = at_norm(c, gv, xv);
                    *o = (cv.from)(k0 * gn + k1 * ((cv.to)(xv) - mean[c]) + k2);
                }
            });
            T::into_storage(dx)
        });
        let per_c = |f: &dyn Fn(usize) -> f64| -> CpuStorage {
            R::into_storage((0..spec.channels).map(|c| R::from_f64(f(c))).collect())
        };
        Ok(Grads {
            dx,
            dweight: needs[1].then(|| per_c(&|c| sums[c].1 * rstd[c].to_f64())),
            dbias: needs[2].then(|| per_c(&|c| sums[c].0)),
        })
    })
}
