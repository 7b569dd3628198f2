//! Reductions over any set of dims. The view is permuted so the reduced dims come last; then each
//! output element reduces one contiguous span. Sums accumulate in f64 over fixed chunks combined in
//! order, so results do not depend on the number of threads.

use super::map::{gather, CHUNK, PARALLEL_MIN};
use super::{CpuStorage, IntoCpuStorage};
use crate::spec::ReduceOp;
use crate::{cpu_dispatch, DType, Layout, WithDType};
use rayon::prelude::*;
use std::borrow::Cow;

/// Splits the view into `outer` rows of `inner` elements each, the reduced dims innermost.
fn rows_last<'a, T: Copy + Send + Sync>(
    v: &'a [T],
    l: &Layout,
    dims: &[usize],
) -> (Cow<'a, [T]>, usize) {
    let kept: Vec<usize> = (0..l.rank()).filter(|d| !dims.contains(d)).collect();
    let perm: Vec<usize> = kept.iter().chain(dims).copied().collect();
    let pl = l.permuted(&perm);
    let inner: usize = dims.iter().map(|&d| l.shape()[d]).product();
    match pl.contiguous_range() {
        Some(r) => (Cow::Borrowed(&v[r]), inner),
        None => (Cow::Owned(gather(v, &pl)), inner),
    }
}

/// Independent f64 accumulators in `sum_lanes`: one serial chain of adds waits on the add's
/// latency; sixteen keep the vector units busy (and fill AVX-512 registers).
const SUM_LANES: usize = 16;

/// The f64 sum of a span, element `i` going to accumulator `i % SUM_LANES`, the accumulators
/// and the tail then added in order: a fixed order, so the same span always gives the same bits.
fn sum_lanes<T: WithDType>(span: &[T]) -> f64 {
    let mut acc = [0.0f64; SUM_LANES];
    let mut blocks = span.chunks_exact(SUM_LANES);
    for b in &mut blocks {
        for (a, x) in acc.iter_mut().zip(b) {
            *a += x.to_f64();
        }
    }
    let tail: f64 = blocks.remainder().iter().map(|x| x.to_f64()).sum();
    acc.iter().sum::<f64>() + tail
}

fn sum_span<T: WithDType>(span: &[T]) -> f64 {
    if span.len() < PARALLEL_MIN {
        return sum_lanes(span);
    }
    let partials: Vec<f64> = span.par_chunks(CHUNK).map(sum_lanes).collect();
    partials.iter().sum()
}

fn for_rows<T: Send + Sync, U: Send>(
    data: &[T],
    inner: usize,
    f: impl Fn(&[T]) -> U + Sync + Send,
) -> Vec<U> {
    if inner == 0 {
        return Vec::new();
    }
    if data.len() < PARALLEL_MIN {
        data.chunks(inner).map(f).collect()
    } else {
        data.par_chunks(inner).map(f).collect()
    }
}

fn extreme<T: WithDType>(span: &[T], want_max: bool) -> (usize, T) {
    let mut best = (0, span[0]);
    for (i, &x) in span.iter().enumerate().skip(1) {
        // NaN wins, as in PyTorch: x != x marks NaN for every float type.
        let better = if want_max { x > best.1 } else { x < best.1 };
        #[allow(clippy::eq_op)]
        let is_nan = x != x && best.1 == best.1;
        if better || is_nan {
            best = (i, x);
        }
    }
    best
}

fn reduce_t<T: WithDType + IntoCpuStorage>(
    v: &[T],
    l: &Layout,
    dims: &[usize],
    op: ReduceOp,
) -> CpuStorage {
    let (data, inner) = rows_last(v, l, dims);
    // Counted from the kept dims, not from the data: reducing an empty dim leaves every kept
    // position with a sum over nothing.
    let outer: usize = (0..l.rank())
        .filter(|d| !dims.contains(d))
        .map(|d| l.shape()[d])
        .product();
    match op {
        ReduceOp::Sum => {
            let sums = if inner == 0 {
                vec![0.0; outer]
            } else if outer == 1 {
                vec![sum_span(&data)]
            } else {
                for_rows(&data, inner, sum_span)
            };
            let out_dtype = if T::DTYPE.is_float() {
                T::DTYPE
            } else {
                DType::I64
            };
            CpuStorage::from_f64s(&sums, out_dtype)
        }
        ReduceOp::Max | ReduceOp::Min => {
            let want_max = op == ReduceOp::Max;
            T::into_storage(for_rows(&data, inner, |s| extreme(s, want_max).1))
        }
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            let want_max = op == ReduceOp::ArgMax;
            CpuStorage::I64(for_rows(&data, inner, |s| extreme(s, want_max).0 as i64))
        }
    }
}

/// Reduces `dims` (sorted, non-empty, each of non-zero size for max/min/arg*). The result is
/// contiguous with the kept dims in order.
pub fn reduce(s: &CpuStorage, l: &Layout, dims: &[usize], op: ReduceOp) -> CpuStorage {
    cpu_dispatch!(s, v => reduce_t(v, l, dims, op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_over_the_first_dim_of_a_matrix_sums_columns() {
        let s = CpuStorage::F32((0..6).map(|x| x as f32).collect());
        let out = reduce(&s, &Layout::contiguous(&[2, 3]), &[0], ReduceOp::Sum);
        let CpuStorage::F32(v) = out else { panic!() };
        assert_eq!(v, vec![3.0, 5.0, 7.0]);
    }

    #[test]
    fn a_sum_counts_every_lane_and_the_tail() {
        // 3 * SUM_LANES + 5 elements, each a distinct power of two, so any dropped or doubled
        // element changes the (exact) sum.
        let n = 3 * SUM_LANES + 5;
        let v: Vec<f64> = (0..n).map(|i| (i as f64).exp2()).collect();
        assert_eq!(sum_lanes(&v), (n as f64).exp2() - 1.0);
    }

    #[test]
    fn a_large_sum_is_identical_across_thread_counts() {
        let v: Vec<f32> = (0..1_000_003i64)
            .map(|i| ((i * 7919) % 1000) as f32 * 1e-3)
            .collect();
        let s = CpuStorage::F32(v);
        let l = Layout::contiguous(&[1_000_003]);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| reduce(&s, &l, &[0], ReduceOp::Sum));
        let four = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap()
            .install(|| reduce(&s, &l, &[0], ReduceOp::Sum));
        let (CpuStorage::F32(a), CpuStorage::F32(b)) = (one, four) else {
            panic!()
        };
        assert_eq!(a[0].to_bits(), b[0].to_bits());
    }
}
