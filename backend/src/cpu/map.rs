//! Element-walking helpers that every CPU kernel builds on: gather a strided view, map one view,
//! zip two broadcast views. Large contiguous work is split across rayon in fixed chunks, so the
//! result never depends on thread timing; small work stays serial so tiny ops stay cheap.

use crate::Layout;
use rayon::prelude::*;

/// Below this many elements a kernel runs serially: a rayon hand-off costs more than the work.
pub const PARALLEL_MIN: usize = 1 << 15;
/// The fixed chunk that parallel loops split work into.
pub const CHUNK: usize = 1 << 13;

/// The view's elements in row-major order, as a new `Vec`.
pub fn gather<T: Copy + Send + Sync>(data: &[T], layout: &Layout) -> Vec<T> {
    map(data, layout, |x| x)
}

/// Applies `f` to every element of the view, in row-major order.
pub fn map<T, U, F>(data: &[T], layout: &Layout, f: F) -> Vec<U>
where
    T: Copy + Send + Sync,
    U: Copy + Send + Sync,
    F: Fn(T) -> U + Sync + Send,
{
    let n = layout.numel();
    if let Some(r) = layout.contiguous_range() {
        let src = &data[r];
        if n < PARALLEL_MIN {
            return src.iter().map(|&x| f(x)).collect();
        }
        return src.par_iter().map(|&x| f(x)).collect();
    }
    let mut out = Vec::with_capacity(n);
    if n < PARALLEL_MIN || layout.rank() == 0 {
        layout.for_each_index(|i| out.push(f(data[i])));
        return out;
    }
    let (starts, len, stride) = layout.row_starts();
    let rows: Vec<Vec<U>> = starts
        .par_iter()
        .map(|&s| (0..len).map(|j| f(data[s + j * stride])).collect())
        .collect();
    rows.into_iter().for_each(|r| out.extend(r));
    out
}

/// Applies `f` to pairs of elements of two views of the same shape (already broadcast).
pub fn zip_map<A, B, U, F>(a: &[A], la: &Layout, b: &[B], lb: &Layout, f: F) -> Vec<U>
where
    A: Copy + Send + Sync,
    B: Copy + Send + Sync,
    U: Copy + Send + Sync,
    F: Fn(A, B) -> U + Sync + Send,
{
    debug_assert_eq!(la.shape(), lb.shape());
    let n = la.numel();
    match (la.contiguous_range(), lb.contiguous_range()) {
        (Some(ra), Some(rb)) => {
            let (sa, sb) = (&a[ra], &b[rb]);
            if n < PARALLEL_MIN {
                return sa.iter().zip(sb).map(|(&x, &y)| f(x, y)).collect();
            }
            return sa
                .par_iter()
                .zip(sb.par_iter())
                .map(|(&x, &y)| f(x, y))
                .collect();
        }
        (Some(ra), None) if lb.numel() > 0 && lb.strides().iter().all(|&s| s == 0) => {
            let y = b[lb.offset()];
            let sa = &a[ra];
            if n < PARALLEL_MIN {
                return sa.iter().map(|&x| f(x, y)).collect();
            }
            return sa.par_iter().map(|&x| f(x, y)).collect();
        }
        _ => {}
    }
    if n == 0 {
        return Vec::new();
    }
    if la.rank() == 0 {
        return vec![f(a[la.offset()], b[lb.offset()])];
    }
    let (sa, len, stride_a) = la.row_starts();
    let (sb, _, stride_b) = lb.row_starts();
    let row = |(&i, &j): (&usize, &usize)| -> Vec<U> {
        (0..len)
            .map(|k| f(a[i + k * stride_a], b[j + k * stride_b]))
            .collect()
    };
    let rows: Vec<Vec<U>> = if n < PARALLEL_MIN {
        sa.iter().zip(&sb).map(row).collect()
    } else {
        sa.par_iter().zip(sb.par_iter()).map(row).collect()
    };
    let mut out = Vec::with_capacity(n);
    rows.into_iter().for_each(|r| out.extend(r));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zip_map_broadcasts_a_row_over_a_matrix() {
        let a: Vec<f32> = (0..6).map(|x| x as f32).collect();
        let b = [10.0f32, 20.0, 30.0];
        let la = Layout::contiguous(&[2, 3]);
        let lb = Layout::contiguous(&[3]).broadcast_to("t", &[2, 3]).unwrap();
        assert_eq!(
            zip_map(&a, &la, &b, &lb, |x, y| x + y),
            vec![10.0, 21.0, 32.0, 13.0, 24.0, 35.0]
        );
    }

    #[test]
    fn map_of_a_large_transposed_view_matches_a_serial_walk() {
        let a: Vec<f32> = (0..300 * 200).map(|x| x as f32).collect();
        let l = Layout::contiguous(&[300, 200]).permuted(&[1, 0]);
        let got = map(&a, &l, |x| x * 2.0);
        let mut want = vec![];
        l.for_each_index(|i| want.push(a[i] * 2.0));
        assert_eq!(got, want);
    }
}
