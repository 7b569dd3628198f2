//! LayerNorm and RMSNorm over contiguous rows, forward and backward. Row sums accumulate in f64
//! and the rest computes in f32 (f64 for F64); rows run in parallel, and the weight and bias
//! gradients sum fixed chunks of rows in order, so results never depend on thread timing.

use super::map::PARALLEL_MIN;
use super::{CpuStorage, IntoCpuStorage};
use crate::spec::NormSpec;
use crate::spec::Real;
use crate::{DType, Error, Result, WithDType};
use half::{bf16, f16};
use rayon::prelude::*;

/// Rows per partial sum of the weight and bias gradients: fixed, so the order of additions is.
const ROWS_PER_CHUNK: usize = 64;

/// A contiguous run of elements of a storage, starting at `offset`.
#[derive(Clone, Copy)]
pub struct Part<'a> {
    pub storage: &'a CpuStorage,
    pub offset: usize,
}

impl<'a> Part<'a> {
    pub fn new(storage: &'a CpuStorage, offset: usize) -> Self {
        Part { storage, offset }
    }

    pub fn slice_of<T: IntoCpuStorage>(self, len: usize, op: &'static str) -> Result<&'a [T]> {
        T::slice(self.storage)
            .and_then(|v| v.get(self.offset..self.offset.checked_add(len)?))
            .ok_or_else(|| {
                Error::invalid(
                    op,
                    format!(
                        "expected {len} {:?} elements at offset {}, got a {:?} storage of {}",
                        T::DTYPE,
                        self.offset,
                        self.storage.dtype(),
                        self.storage.len()
                    ),
                )
            })
    }
}

/// The forward's output and what it saves for the backward: per-row mean (zeros for RMSNorm)
/// and rstd = 1/sqrt(var + eps), in the compute dtype.
pub struct NormForward {
    pub y: CpuStorage,
    pub mean: CpuStorage,
    pub rstd: CpuStorage,
}

/// Gradients for the input (its dtype) and for the weight and bias (the compute dtype); `None`
/// where not asked for.
pub struct NormGrads {
    pub dx: Option<CpuStorage>,
    pub dweight: Option<CpuStorage>,
    pub dbias: Option<CpuStorage>,
}

/// `f(r)` for each row, in parallel when the work is large enough to pay for it.
fn per_row<U: Send>(rows: usize, work: usize, f: impl Fn(usize) -> U + Sync + Send) -> Vec<U> {
    if work < PARALLEL_MIN {
        (0..rows).map(f).collect()
    } else {
        (0..rows).into_par_iter().map(f).collect()
    }
}

/// Fills `out` row by row (`cols` > 0).
fn fill_rows<T: Send>(out: &mut [T], cols: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    if out.len() < PARALLEL_MIN {
        out.chunks_mut(cols)
            .enumerate()
            .for_each(|(r, row)| f(r, row));
    } else {
        out.par_chunks_mut(cols)
            .enumerate()
            .for_each(|(r, row)| f(r, row));
    }
}

/// The element conversions of one input dtype into its compute type `R` and back.
pub(crate) struct Conv<T, R> {
    pub to: fn(T) -> R,
    pub from: fn(R) -> T,
}

/// dx, dweight and dbias, each when asked for.
type GradVecs<T, R> = (Option<Vec<T>>, Option<Vec<R>>, Option<Vec<R>>);

fn forward_t<T: WithDType, R: Real + WithDType>(
    x: &[T],
    w: Option<&[R]>,
    b: Option<&[R]>,
    spec: NormSpec,
    cv: Conv<T, R>,
) -> (Vec<T>, Vec<R>, Vec<R>) {
    let (rows, cols) = (spec.rows, spec.cols);
    let stats: Vec<(R, R)> = per_row(rows, rows * cols, |r| {
        let row = &x[r * cols..(r + 1) * cols];
        let mean = if spec.rms {
            0.0
        } else {
            row.iter().map(|&v| (cv.to)(v).to_f64()).sum::<f64>() / cols as f64
        };
        let var = row
            .iter()
            .map(|&v| {
                let d = (cv.to)(v).to_f64() - mean;
                d * d
            })
            .sum::<f64>()
            / cols as f64;
        (
            R::from_f64(mean),
            R::from_f64(1.0 / (var + spec.eps).sqrt()),
        )
    });
    let mut y = vec![T::zero(); rows * cols];
    fill_rows(&mut y, cols, |r, out| {
        let (mean, rstd) = stats[r];
        let row = &x[r * cols..(r + 1) * cols];
        for (j, (o, &v)) in out.iter_mut().zip(row).enumerate() {
            let mut h = ((cv.to)(v) - mean) * rstd;
            if let Some(w) = w {
                h = h * w[j];
            }
            if let Some(b) = b {
                h = h + b[j];
            }
            *o = (cv.from)(h);
        }
    });
    let (mean, rstd) = stats.into_iter().unzip();
    (y, mean, rstd)
}

struct BackwardInputs<'a, T, R> {
    x: &'a [T],
    g: &'a [T],
    w: Option<&'a [R]>,
    mean: &'a [R],
    rstd: &'a [R],
}

fn backward_t<T: WithDType, R: Real + WithDType>(
    inp: BackwardInputs<'_, T, R>,
    spec: NormSpec,
    needs: [bool; 3],
    cv: Conv<T, R>,
) -> GradVecs<T, R> {
    let (rows, cols) = (spec.rows, spec.cols);
    let BackwardInputs {
        x,
        g,
        w,
        mean,
        rstd,
    } = inp;
    let xhat = |r: usize, j: usize| ((cv.to)(x[r * cols + j]) - mean[r]) * rstd[r];
    let dx = needs[0].then(|| {
        let mut dx = vec![T::zero(); rows * cols];
        fill_rows(&mut dx, cols, |r, out| {
            let gw = |j: usize| {
                let gv = (cv.to)(g[r * cols + j]);
                w.map_or(gv, |w| gv * w[j])
            };
            let (mut sg, mut sgx) = (0.0f64, 0.0f64);
            for j in 0..cols {
                let v = gw(j);
                sg += v.to_f64();
                sgx += (v * xhat(r, j)).to_f64();
            }
            let mg = if spec.rms {
                R::c(0.0)
            } else {
                R::from_f64(sg / cols as f64)
            };
            let mgx = R::from_f64(sgx / cols as f64);
            for (j, o) in out.iter_mut().enumerate() {
                *o = (cv.from)(rstd[r] * (gw(j) - mg - xhat(r, j) * mgx));
            }
        });
        dx
    });
    let (dw, db) = if needs[1] || needs[2] {
        // Per-chunk column sums in f64, combined in chunk order.
        let chunks = rows.div_ceil(ROWS_PER_CHUNK);
        let partial: Vec<(Vec<f64>, Vec<f64>)> = per_row(chunks, rows * cols, |c| {
            let (mut pw, mut pb) = (vec![0.0f64; cols], vec![0.0f64; cols]);
            for r in c * ROWS_PER_CHUNK..((c + 1) * ROWS_PER_CHUNK).min(rows) {
                for j in 0..cols {
                    let gv = (cv.to)(g[r * cols + j]);
                    pw[j] += (gv * xhat(r, j)).to_f64();
                    pb[j] += gv.to_f64();
                }
            }
            (pw, pb)
        });
        let (mut sw, mut sb) = (vec![0.0f64; cols], vec![0.0f64; cols]);
        for (pw, pb) in &partial {
            sw.iter_mut().zip(pw).for_each(|(s, v)| *s += v);
            sb.iter_mut().zip(pb).for_each(|(s, v)| *s += v);
        }
        let to_r = |v: Vec<f64>| v.into_iter().map(R::from_f64).collect::<Vec<R>>();
        (needs[1].then(|| to_r(sw)), needs[2].then(|| to_r(sb)))
    } else {
        (None, None)
    };
    (dx, dw, db)
}

fn unsupported(op: &'static str, dtype: DType) -> Error {
    Error::UnsupportedDType {
        op,
        dtype,
        detail: ": needs a float tensor".into(),
    }
}

fn name(spec: NormSpec) -> &'static str {
    if spec.rms {
        "rms_norm"
    } else {
        "layer_norm"
    }
}

/// `x` holds `rows * cols` elements from its offset; `w` and `b` hold `cols` elements of the
/// compute dtype (F64 for an F64 input, F32 otherwise).
pub fn norm_forward(
    x: Part,
    w: Option<Part>,
    b: Option<Part>,
    spec: NormSpec,
) -> Result<NormForward> {
    fn run<T: IntoCpuStorage, R: Real + IntoCpuStorage>(
        x: Part,
        w: Option<Part>,
        b: Option<Part>,
        spec: NormSpec,
        cv: Conv<T, R>,
    ) -> Result<NormForward> {
        let op = name(spec);
        let xs = x.slice_of::<T>(spec.rows * spec.cols, op)?;
        let ws = w.map(|p| p.slice_of::<R>(spec.cols, op)).transpose()?;
        let bs = b.map(|p| p.slice_of::<R>(spec.cols, op)).transpose()?;
        let (y, mean, rstd) = forward_t(xs, ws, bs, spec, cv);
        Ok(NormForward {
            y: T::into_storage(y),
            mean: R::into_storage(mean),
            rstd: R::into_storage(rstd),
        })
    }
    match x.storage.dtype() {
        DType::F64 => run::<f64, f64>(
            x,
            w,
            b,
            spec,
            Conv {
                to: |v| v,
                from: |v| v,
            },
        ),
        DType::F32 => run::<f32, f32>(
            x,
            w,
            b,
            spec,
            Conv {
                to: |v| v,
                from: |v| v,
            },
        ),
        DType::BF16 => run::<bf16, f32>(
            x,
            w,
            b,
            spec,
            Conv {
                to: bf16::to_f32,
                from: bf16::from_f32,
            },
        ),
        DType::F16 => run::<f16, f32>(
            x,
            w,
            b,
            spec,
            Conv {
                to: f16::to_f32,
                from: f16::from_f32,
            },
        ),
        other => Err(unsupported(name(spec), other)),
    }
}

/// The gradients from the saved input `x`, the output gradient `g` (x's dtype, contiguous), the
/// weight (compute dtype) and the forward's statistics. `needs` = [dx, dweight, dbias].
pub fn norm_backward(
    x: Part,
    g: Part,
    w: Option<Part>,
    mean: &CpuStorage,
    rstd: &CpuStorage,
    spec: NormSpec,
    needs: [bool; 3],
) -> Result<NormGrads> {
    #[allow(clippy::too_many_arguments)]
    fn run<T: IntoCpuStorage, R: Real + IntoCpuStorage>(
        x: Part,
        g: Part,
        w: Option<Part>,
        mean: &CpuStorage,
        rstd: &CpuStorage,
        spec: NormSpec,
        needs: [bool; 3],
        cv: Conv<T, R>,
    ) -> Result<NormGrads> {
        let op = name(spec);
        let n = spec.rows * spec.cols;
        let inp = BackwardInputs {
            x: x.slice_of::<T>(n, op)?,
            g: g.slice_of::<T>(n, op)?,
            w: w.map(|p| p.slice_of::<R>(spec.cols, op)).transpose()?,
            mean: Part::new(mean, 0).slice_of::<R>(spec.rows, op)?,
            rstd: Part::new(rstd, 0).slice_of::<R>(spec.rows, op)?,
        };
        let (dx, dw, db) = backward_t(inp, spec, needs, cv);
        Ok(NormGrads {
            dx: dx.map(T::into_storage),
            dweight: dw.map(R::into_storage),
            dbias: db.map(R::into_storage),
        })
    }
    match x.storage.dtype() {
        DType::F64 => run::<f64, f64>(
            x,
            g,
            w,
            mean,
            rstd,
            spec,
            needs,
            Conv {
                to: |v| v,
                from: |v| v,
            },
        ),
        DType::F32 => run::<f32, f32>(
            x,
            g,
            w,
            mean,
            rstd,
            spec,
            needs,
            Conv {
                to: |v| v,
                from: |v| v,
            },
        ),
        DType::BF16 => run::<bf16, f32>(
            x,
            g,
            w,
            mean,
            rstd,
            spec,
            needs,
            Conv {
                to: bf16::to_f32,
                from: bf16::from_f32,
            },
        ),
        DType::F16 => run::<f16, f32>(
            x,
            g,
            w,
            mean,
            rstd,
            spec,
            needs,
            Conv {
                to: f16::to_f32,
                from: f16::from_f32,
            },
        ),
        other => Err(unsupported(name(spec), other)),
    }
}
