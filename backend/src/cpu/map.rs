//! Element-walking helpers that every CPU kernel builds on: gather a strided view, map one view,
//! zip two or three broadcast views. Large work is split across rayon in fixed chunks that write
//! straight into one output buffer, so the result never depends on thread timing; small work
//! stays serial so tiny ops stay cheap. Contiguous operands are walked as slices, so simple
//! bodies vectorize.

use super::alloc;
use crate::Layout;
use rayon::prelude::*;
use std::borrow::Cow;
use std::mem::MaybeUninit;

/// Below this many elements a kernel runs serially: a rayon hand-off costs more than the work.
pub const PARALLEL_MIN: usize = 1 << 15;
/// The fixed chunk that parallel loops split work into.
pub const CHUNK: usize = 1 << 13;

/// A `Vec` of `n` elements built in fixed chunks of `chunk` elements: `items(start, len)` yields
/// the elements `start..start + len`. The chunks run in parallel when `n` is large.
fn collect_chunks<U, I>(n: usize, chunk: usize, items: impl Fn(usize, usize) -> I + Sync) -> Vec<U>
where
    U: Send,
    I: Iterator<Item = U>,
{
    let mut out = alloc::with_capacity(n);
    let chunk = chunk.max(1);
    let fill = |(c, dst): (usize, &mut [MaybeUninit<U>])| {
        let start = c * chunk;
        write_chunk(dst, items(start, dst.len()));
    };
    let dst = &mut out.spare_capacity_mut()[..n];
    if n < PARALLEL_MIN {
        dst.chunks_mut(chunk).enumerate().for_each(fill);
    } else {
        dst.par_chunks_mut(chunk).enumerate().for_each(fill);
    }
    // SAFETY: the chunks tile `out[..n]` and each one was written in full (asserted above; a
    // panic there unwinds past this line with the length still 0).
    unsafe { out.set_len(n) };
    out
}

/// Writes `items` into every slot of `dst`; panics if `items` runs short.
#[inline(always)]
fn write_all<U>(dst: &mut [MaybeUninit<U>], items: impl Iterator<Item = U>) {
    let (mut written, len) = (0, dst.len());
    for (d, x) in dst.iter_mut().zip(items) {
        d.write(x);
        written += 1;
    }
    // `assert!`, not `assert_eq!`: taking `&written` for the message would keep the counter in
    // memory and block vectorization.
    assert!(written == len, "a kernel chunk yielded too few elements");
}

/// `write_all` compiled for AVX2, so that the loop runs 8 lanes wide (the crate's baseline,
/// x86-64 v1, has only 4-lane SSE2). Lanes do not interact and Rust never fuses a multiply with
/// an add, so it gives the same bits as the baseline loop.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn write_all_avx2<U>(dst: &mut [MaybeUninit<U>], items: impl Iterator<Item = U>) {
    write_all(dst, items)
}

/// Writes one chunk of a kernel's output, with the widest vectors this CPU has.
fn write_chunk<U>(dst: &mut [MaybeUninit<U>], items: impl Iterator<Item = U>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `write_all_avx2` needs AVX2, which this CPU has (checked just above).
        return unsafe { write_all_avx2(dst, items) };
    }
    write_all(dst, items)
}

/// True when every element of the view is the same storage element (a broadcast scalar).
fn is_scalar_broadcast(l: &Layout) -> bool {
    l.numel() > 0 && l.strides().iter().all(|&s| s == 0)
}

/// The view as a contiguous slice, copied only when it is not contiguous already.
pub(super) fn contiguous<'a, T: Copy + Send + Sync>(data: &'a [T], l: &Layout) -> Cow<'a, [T]> {
    match l.contiguous_range() {
        Some(r) => Cow::Borrowed(&data[r]),
        None => Cow::Owned(gather(data, l)),
    }
}

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
    let f = &f;
    if let Some(r) = layout.contiguous_range() {
        let src = &data[r];
        return collect_chunks(n, CHUNK, |s, len| src[s..s + len].iter().map(|&x| f(x)));
    }
    if n == 0 {
        return Vec::new();
    }
    // One chunk per innermost row.
    let (starts, len, stride) = layout.row_starts();
    collect_chunks(n, len, |s, _| {
        let base = starts[s / len];
        (0..len).map(move |j| f(data[base + j * stride]))
    })
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
    let f = &f;
    match (la.contiguous_range(), lb.contiguous_range()) {
        (Some(ra), Some(rb)) => {
            let (sa, sb) = (&a[ra], &b[rb]);
            return collect_chunks(n, CHUNK, |s, len| {
                let e = s + len;
                sa[s..e].iter().zip(&sb[s..e]).map(|(&x, &y)| f(x, y))
            });
        }
        (Some(ra), None) if is_scalar_broadcast(lb) => {
            let (sa, y) = (&a[ra], b[lb.offset()]);
            return collect_chunks(n, CHUNK, |s, len| {
                sa[s..s + len].iter().map(move |&x| f(x, y))
            });
        }
        (None, Some(rb)) if is_scalar_broadcast(la) => {
            let (x, sb) = (a[la.offset()], &b[rb]);
            return collect_chunks(n, CHUNK, |s, len| {
                sb[s..s + len].iter().map(move |&y| f(x, y))
            });
        }
        _ => {}
    }
    if n == 0 {
        return Vec::new();
    }
    // One chunk per innermost row (a broadcast bias row, a transposed operand).
    let (ra, len, stride_a) = la.row_starts();
    let (rb, _, stride_b) = lb.row_starts();
    if stride_a == 1 && stride_b == 1 {
        return collect_chunks(n, len, |s, _| {
            let (i, j) = (ra[s / len], rb[s / len]);
            a[i..i + len]
                .iter()
                .zip(&b[j..j + len])
                .map(|(&x, &y)| f(x, y))
        });
    }
    collect_chunks(n, len, |s, _| {
        let (i, j) = (ra[s / len], rb[s / len]);
        (0..len).map(move |k| f(a[i + k * stride_a], b[j + k * stride_b]))
    })
}

/// Applies `f` to triples of elements of three views of the same shape (already broadcast).
/// Views that are not contiguous are gathered first.
pub fn zip3_map<A, B, C, U, F>(
    (a, la): (&[A], &Layout),
    (b, lb): (&[B], &Layout),
    (c, lc): (&[C], &Layout),
    f: F,
) -> Vec<U>
where
    A: Copy + Send + Sync,
    B: Copy + Send + Sync,
    C: Copy + Send + Sync,
    U: Copy + Send + Sync,
    F: Fn(A, B, C) -> U + Sync + Send,
{
    debug_assert!(la.shape() == lb.shape() && lb.shape() == lc.shape());
    let (a, b, c) = (contiguous(a, la), contiguous(b, lb), contiguous(c, lc));
    let (a, b, c, f) = (&a[..], &b[..], &c[..], &f);
    collect_chunks(la.numel(), CHUNK, |s, len| {
        let e = s + len;
        a[s..e]
            .iter()
            .zip(&b[s..e])
            .zip(&c[s..e])
            .map(|((&x, &y), &z)| f(x, y, z))
    })
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
    fn a_large_zip_fills_every_chunk_in_order() {
        // Parallel path, and a last chunk shorter than CHUNK.
        let n = 5 * CHUNK + 7;
        let a: Vec<u32> = (0..n as u32).collect();
        let b: Vec<u32> = (0..n as u32).map(|x| 3 * x).collect();
        let l = Layout::contiguous(&[n]);
        let got = zip_map(&a, &l, &b, &l, |x, y| x + y);
        assert!(n >= PARALLEL_MIN);
        assert!(got.iter().enumerate().all(|(i, &v)| v == 4 * i as u32));
    }

    #[test]
    fn zip_map_takes_a_broadcast_scalar_on_either_side() {
        let a = [1.0f32, 2.0, 3.0];
        let la = Layout::contiguous(&[3]);
        let s = Layout::contiguous(&[]).broadcast_to("t", &[3]).unwrap();
        assert_eq!(
            zip_map(&[10.0f32], &s, &a, &la, |x, y| x - y),
            vec![9.0, 8.0, 7.0]
        );
        assert_eq!(
            zip_map(&a, &la, &[10.0f32], &s, |x, y| x - y),
            vec![-9.0, -8.0, -7.0]
        );
    }

    #[test]
    fn zip_map_of_a_transposed_and_a_contiguous_view_pairs_row_major_elements() {
        let a: Vec<i64> = (0..6).collect();
        let lt = Layout::contiguous(&[3, 2]).permuted(&[1, 0]);
        let b = [0i64, 10, 20, 30, 40, 50];
        let lb = Layout::contiguous(&[2, 3]);
        assert_eq!(
            zip_map(&a, &lt, &b, &lb, |x, y| x + y),
            vec![0, 12, 24, 31, 43, 55]
        );
    }

    #[test]
    fn zip3_map_gathers_strided_and_broadcast_views() {
        let c = [true, false];
        let lc = Layout::contiguous(&[2, 1])
            .broadcast_to("t", &[2, 3])
            .unwrap();
        let a: Vec<i64> = (0..6).collect();
        let la = Layout::contiguous(&[3, 2]).permuted(&[1, 0]);
        let b = [-1i64];
        let lb = Layout::contiguous(&[]).broadcast_to("t", &[2, 3]).unwrap();
        let got = zip3_map(
            (&c, &lc),
            (&a, &la),
            (&b, &lb),
            |c, x, y| if c { x } else { y },
        );
        assert_eq!(got, vec![0, 2, 4, -1, -1, -1]);
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
