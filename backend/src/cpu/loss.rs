//! Fused cross-entropy over contiguous logits [rows, cols] with i64 targets, ignore_index and
//! label smoothing s, computed in f32 (f64 for F64) whatever the logits' dtype:
//!   loss[r] = lse[r] - (1 - s) x[r, t] - s mean_c x[r, c]   (0 for an ignored row)
//!   dx[r, c] = g[r] (softmax[r, c] - (1 - s) [c == t] - s / cols)
//! Targets are range-checked by the op before the kernel runs.

use super::map::PARALLEL_MIN;
use super::norm::{Conv, Part};
use super::{CpuStorage, IntoCpuStorage};
use crate::spec::real::Real;
use crate::spec::CrossEntropySpec;
use crate::{DType, Error, Result, WithDType};
use half::{bf16, f16};
use rayon::prelude::*;

/// Per-row loss, logsumexp (for the backward) and 1/0 for rows that count toward the mean, all
/// in the compute dtype.
pub struct CrossEntropyRows {
    pub loss: CpuStorage,
    pub lse: CpuStorage,
    pub valid: CpuStorage,
}

fn rows_map<U: Send>(rows: usize, work: usize, f: impl Fn(usize) -> U + Sync + Send) -> Vec<U> {
    if work < PARALLEL_MIN {
        (0..rows).map(f).collect()
    } else {
        (0..rows).into_par_iter().map(f).collect()
    }
}

fn forward_t<T: WithDType, R: Real + WithDType>(
    x: &[T],
    t: &[i64],
    spec: CrossEntropySpec,
    to: fn(T) -> R,
) -> Vec<(R, R, R)> {
    let cols = spec.cols;
    rows_map(spec.rows, spec.rows * cols, |r| {
        let Some(target) = spec.target(t[r]) else {
            return (R::c(0.0), R::c(0.0), R::c(0.0));
        };
        let row = &x[r * cols..(r + 1) * cols];
        let m = row
            .iter()
            .fold(R::c(f64::NEG_INFINITY), |m, &v| m.max(to(v)));
        let s: f64 = row.iter().map(|&v| (to(v) - m).exp().to_f64()).sum();
        let lse = m + R::from_f64(s).ln();
        let s_coef = R::c(spec.smoothing);
        let mut loss = lse - (R::c(1.0) - s_coef) * to(row[target]);
        if spec.smoothing > 0.0 {
            let sum_x: f64 = row.iter().map(|&v| to(v).to_f64()).sum();
            loss = loss - s_coef * R::from_f64(sum_x / cols as f64);
        }
        (loss, lse, R::c(1.0))
    })
}

fn backward_t<T: WithDType, R: Real + WithDType>(
    x: &[T],
    t: &[i64],
    lse: &[R],
    g: &[R],
    spec: CrossEntropySpec,
    cv: Conv<T, R>,
) -> Vec<T> {
    let cols = spec.cols;
    let mut dx = vec![T::zero(); spec.rows * cols];
    if cols == 0 {
        return dx;
    }
    let row = |r: usize, out: &mut [T]| {
        let Some(target) = spec.target(t[r]) else {
            return;
        };
        let s = R::c(spec.smoothing);
        let base = s / R::c(cols as f64);
        for (c, (o, &v)) in out.iter_mut().zip(&x[r * cols..(r + 1) * cols]).enumerate() {
            let p = ((cv.to)(v) - lse[r]).exp();
            let want = if c == target {
                base + R::c(1.0) - s
            } else {
                base
            };
            *o = (cv.from)(g[r] * (p - want));
        }
    };
    if dx.len() < PARALLEL_MIN {
        dx.chunks_mut(cols).enumerate().for_each(|(r, o)| row(r, o));
    } else {
        dx.par_chunks_mut(cols)
            .enumerate()
            .for_each(|(r, o)| row(r, o));
    }
    dx
}

fn unsupported(dtype: DType) -> Error {
    Error::UnsupportedDType {
        op: "cross_entropy",
        dtype,
        detail: ": logits must be float".into(),
    }
}

/// `x` holds rows*cols logits from its offset, `t` the rows' targets.
pub fn cross_entropy_forward(
    x: Part,
    t: &[i64],
    spec: CrossEntropySpec,
) -> Result<CrossEntropyRows> {
    fn run<T: IntoCpuStorage, R: Real + IntoCpuStorage>(
        x: Part,
        t: &[i64],
        spec: CrossEntropySpec,
        to: fn(T) -> R,
    ) -> Result<CrossEntropyRows> {
        let xs = x.slice_of::<T>(spec.rows * spec.cols, "cross_entropy")?;
        let rows = forward_t(xs, t, spec, to);
        let pick = |k: usize| {
            R::into_storage(
                rows.iter()
                    .map(|v| match k {
                        0 => v.0,
                        1 => v.1,
                        _ => v.2,
                    })
                    .collect(),
            )
        };
        Ok(CrossEntropyRows {
            loss: pick(0),
            lse: pick(1),
            valid: pick(2),
        })
    }
    match x.storage.dtype() {
        DType::F64 => run::<f64, f64>(x, t, spec, |v| v),
        DType::F32 => run::<f32, f32>(x, t, spec, |v| v),
        DType::BF16 => run::<bf16, f32>(x, t, spec, bf16::to_f32),
        DType::F16 => run::<f16, f32>(x, t, spec, f16::to_f32),
        other => Err(unsupported(other)),
    }
}

/// The logits' gradient (their dtype) from the saved logits, targets and logsumexp, and the
/// gradient `g` of each row's loss (compute dtype, contiguous).
pub fn cross_entropy_backward(
    x: Part,
    t: &[i64],
    lse: &CpuStorage,
    g: Part,
    spec: CrossEntropySpec,
) -> Result<CpuStorage> {
    fn run<T: IntoCpuStorage, R: Real + IntoCpuStorage>(
        x: Part,
        t: &[i64],
        lse: &CpuStorage,
        g: Part,
        spec: CrossEntropySpec,
        cv: Conv<T, R>,
    ) -> Result<CpuStorage> {
        let op = "cross_entropy";
        let xs = x.slice_of::<T>(spec.rows * spec.cols, op)?;
        let lse = Part::new(lse, 0).slice_of::<R>(spec.rows, op)?;
        let g = g.slice_of::<R>(spec.rows, op)?;
        Ok(T::into_storage(backward_t(xs, t, lse, g, spec, cv)))
    }
    match x.storage.dtype() {
        DType::F64 => run::<f64, f64>(
            x,
            t,
            lse,
            g,
            spec,
            Conv {
                to: |v| v,
                from: |v| v,
            },
        ),
        DType::F32 => run::<f32, f32>(
            x,
            t,
            lse,
            g,
            spec,
            Conv {
                to: |v| v,
                from: |v| v,
            },
        ),
        DType::BF16 => run::<bf16, f32>(
            x,
            t,
            lse,
            g,
            spec,
            Conv {
                to: bf16::to_f32,
                from: bf16::from_f32,
            },
        ),
        DType::F16 => run::<f16, f32>(
            x,
            t,
            lse,
            g,
            spec,
            Conv {
                to: f16::to_f32,
                from: f16::from_f32,
            },
        ),
        other => Err(unsupported(other)),
    }
}
