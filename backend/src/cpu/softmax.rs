//! Softmax and log-softmax over the last dim of a contiguous view, forward and backward.

use super::map::PARALLEL_MIN;
use super::{CpuStorage, IntoCpuStorage};
use crate::spec::Real;
use crate::{cpu_dispatch2, DType, WithDType};
use rayon::prelude::*;

fn rows_apply<T: WithDType>(
    n: usize,
    cols: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) -> Vec<T> {
    let mut out = vec![T::zero(); n];
    if cols == 0 {
        return out;
    }
    if n < PARALLEL_MIN {
        out.chunks_mut(cols)
            .enumerate()
            .for_each(|(r, row)| f(r, row));
    } else {
        out.par_chunks_mut(cols)
            .enumerate()
            .for_each(|(r, row)| f(r, row));
    }
    out
}

fn forward_row<R: Real>(x: impl Iterator<Item = R> + Clone, log: bool, out: &mut [R]) {
    let max = x.clone().fold(R::c(f64::NEG_INFINITY), |m, v| m.max(v));
    let mut sum = R::c(0.0);
    for (o, v) in out.iter_mut().zip(x) {
        *o = v - max;
        sum = sum + o.exp();
    }
    if log {
        let lse = sum.ln();
        out.iter_mut().for_each(|o| *o = *o - lse);
    } else {
        let inv = R::c(1.0) / sum;
        out.iter_mut().for_each(|o| *o = o.exp() * inv);
    }
}

fn softmax_t<T: WithDType, R: Real>(
    x: &[T],
    cols: usize,
    log: bool,
    to: fn(T) -> R,
    from: fn(R) -> T,
) -> Vec<T> {
    rows_apply(x.len(), cols, |r, row| {
        let src = &x[r * cols..(r + 1) * cols];
        let mut tmp: Vec<R> = vec![R::c(0.0); cols];
        forward_row(src.iter().map(|&v| to(v)), log, &mut tmp);
        row.iter_mut().zip(tmp).for_each(|(o, v)| *o = from(v));
    })
}

/// `x` is contiguous with rows of `cols` elements.
pub fn softmax(x: &CpuStorage, cols: usize, log: bool) -> CpuStorage {
    match x {
        CpuStorage::F64(v) => CpuStorage::F64(softmax_t(v, cols, log, |a| a, |a| a)),
        CpuStorage::F32(v) => CpuStorage::F32(softmax_t(v, cols, log, |a| a, |a| a)),
        CpuStorage::BF16(v) => CpuStorage::BF16(softmax_t(
            v,
            cols,
            log,
            WithDType::to_f32,
            WithDType::from_f32,
        )),
        CpuStorage::F16(v) => CpuStorage::F16(softmax_t(
            v,
            cols,
            log,
            WithDType::to_f32,
            WithDType::from_f32,
        )),
        other => unreachable!(
            "softmax on {:?}: the op casts integers to float first",
            other.dtype()
        ),
    }
}

fn backward_t<T: WithDType>(y: &[T], g: &[T], cols: usize, log: bool) -> Vec<T> {
    let wide = T::DTYPE == DType::F64;
    rows_apply(y.len(), cols, |r, row| {
        let (yr, gr) = (&y[r * cols..(r + 1) * cols], &g[r * cols..(r + 1) * cols]);
        // Accumulate the row dot in f64: it is one value per row and sets the gradient's accuracy.
        if log {
            let gsum: f64 = gr.iter().map(|v| v.to_f64()).sum();
            for ((o, &yv), &gv) in row.iter_mut().zip(yr).zip(gr) {
                *o = T::from_f64(gv.to_f64() - yv.to_f64().exp() * gsum);
            }
        } else {
            let dot: f64 = yr
                .iter()
                .zip(gr)
                .map(|(a, b)| a.to_f64() * b.to_f64())
                .sum();
            for ((o, &yv), &gv) in row.iter_mut().zip(yr).zip(gr) {
                *o = if wide {
                    T::from_f64(yv.to_f64() * (gv.to_f64() - dot))
                } else {
                    T::from_f32(yv.to_f32() * (gv.to_f32() - dot as f32))
                };
            }
        }
    })
}

/// Given the forward output `y` and the output gradient `g` (both contiguous, same dtype),
/// returns the input gradient.
pub fn softmax_backward(y: &CpuStorage, g: &CpuStorage, cols: usize, log: bool) -> CpuStorage {
    cpu_dispatch2!(y, g, (a, b) => IntoCpuStorage::into_storage(backward_t(a, b, cols, log)))
}
