//! Indexing kernels: index_select, index_add, gather, scatter_add and the copy that cat uses.
//! Indices arrive checked (0 <= i < size) from the op. Views are made contiguous first and then
//! seen as [outer, dim, inner].

// A contiguous operand is borrowed, not copied: an embedding table read one row per token.
use super::map::{contiguous, gather as gather_view};
use super::{CpuStorage, IntoCpuStorage};
use crate::{cpu_dispatch, cpu_dispatch2, Layout, WithDType};
use std::borrow::Cow;

/// The values of an integer view as i64 (None for float and bool storages).
pub fn indices(s: &CpuStorage, l: &Layout) -> Option<Vec<i64>> {
    Some(match s {
        CpuStorage::I64(v) => gather_view(v, l),
        CpuStorage::U32(v) => super::map::map(v, l, i64::from),
        CpuStorage::U8(v) => super::map::map(v, l, i64::from),
        _ => return None,
    })
}

fn split3(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    (
        shape[..dim].iter().product(),
        shape[dim],
        shape[dim + 1..].iter().product(),
    )
}

fn index_select_t<T: WithDType>(v: &[T], l: &Layout, dim: usize, idx: &[usize]) -> Vec<T> {
    let x = contiguous(v, l);
    let (outer, d, inner) = split3(l.shape(), dim);
    let mut out = Vec::with_capacity(outer * idx.len() * inner);
    for o in 0..outer {
        for &i in idx {
            let start = (o * d + i) * inner;
            out.extend_from_slice(&x[start..start + inner]);
        }
    }
    out
}

pub fn index_select(s: &CpuStorage, l: &Layout, dim: usize, idx: &[usize]) -> CpuStorage {
    cpu_dispatch!(s, v => IntoCpuStorage::into_storage(index_select_t(v, l, dim, idx)))
}

fn add_into<T: WithDType>(dst: &mut T, v: T) {
    *dst = T::from_f64(dst.to_f64() + v.to_f64());
}

fn index_add_t<T: WithDType>(
    base: &[T],
    shape: &[usize],
    dim: usize,
    idx: &[usize],
    src: &[T],
) -> Vec<T> {
    let mut out = base.to_vec();
    let (outer, d, inner) = split3(shape, dim);
    for o in 0..outer {
        for (j, &i) in idx.iter().enumerate() {
            let (dst, s) = ((o * d + i) * inner, (o * idx.len() + j) * inner);
            for k in 0..inner {
                add_into(&mut out[dst + k], src[s + k]);
            }
        }
    }
    out
}

/// base[.., idx[j], ..] += src[.., j, ..] along `dim`; `base` and `src` are contiguous.
pub fn index_add(
    base: &CpuStorage,
    shape: &[usize],
    dim: usize,
    idx: &[usize],
    src: &CpuStorage,
) -> CpuStorage {
    cpu_dispatch2!(base, src, (b, s) => IntoCpuStorage::into_storage(index_add_t(b, shape, dim, idx, s)))
}

/// For each position of an index tensor of `idx_shape`, the flat offset into a contiguous tensor
/// of `shape` that gather/scatter along `dim` touches.
fn gather_offsets(shape: &[usize], dim: usize, idx: &[usize], idx_shape: &[usize]) -> Vec<usize> {
    let strides = crate::layout::contiguous_strides(shape);
    let il = Layout::contiguous(idx_shape);
    let mut offsets = Vec::with_capacity(idx.len());
    let rank = idx_shape.len();
    let mut pos = vec![0usize; rank];
    for &i in idx.iter() {
        let off: usize = (0..rank)
            .map(|d| {
                if d == dim {
                    i * strides[d]
                } else {
                    pos[d] * strides[d]
                }
            })
            .sum();
        offsets.push(off);
        // Advance the row-major position over the index shape.
        for d in (0..rank).rev() {
            pos[d] += 1;
            if pos[d] < il.shape()[d] {
                break;
            }
            pos[d] = 0;
        }
    }
    offsets
}

pub fn gather(
    s: &CpuStorage,
    l: &Layout,
    dim: usize,
    idx: &[usize],
    idx_shape: &[usize],
) -> CpuStorage {
    let offsets = gather_offsets(l.shape(), dim, idx, idx_shape);
    cpu_dispatch!(s, v => {
        let x = contiguous(v, l);
        IntoCpuStorage::into_storage(offsets.iter().map(|&o| x[o]).collect::<Vec<_>>())
    })
}

/// base (contiguous, `shape`) with src (contiguous, `idx_shape`) added at the gathered offsets.
pub fn scatter_add(
    base: &CpuStorage,
    shape: &[usize],
    dim: usize,
    idx: &[usize],
    idx_shape: &[usize],
    src: &CpuStorage,
) -> CpuStorage {
    let offsets = gather_offsets(shape, dim, idx, idx_shape);
    cpu_dispatch2!(base, src, (b, s) => {
        let mut out = b.to_vec();
        offsets.iter().zip(s.iter()).for_each(|(&o, &v)| add_into(&mut out[o], v));
        IntoCpuStorage::into_storage(out)
    })
}

/// Concatenates contiguous parts along `dim`; every part has `shape` except along `dim`.
pub fn cat(parts: &[(&CpuStorage, &Layout)], dim: usize) -> CpuStorage {
    fn cat_t<T: WithDType + IntoCpuStorage>(
        parts: &[(&CpuStorage, &Layout)],
        dim: usize,
    ) -> CpuStorage {
        let gathered: Vec<(Cow<[T]>, usize)> = parts
            .iter()
            .map(|(s, l)| {
                let v = T::slice(s).expect("cat parts share one dtype");
                (contiguous(v, l), l.shape()[dim..].iter().product::<usize>())
            })
            .collect();
        let outer: usize = parts[0].1.shape()[..dim].iter().product();
        let total: usize = gathered.iter().map(|(v, _)| v.len()).sum();
        let mut out = Vec::with_capacity(total);
        for o in 0..outer {
            for (v, block) in &gathered {
                out.extend_from_slice(&v[o * block..(o + 1) * block]);
            }
        }
        T::into_storage(out)
    }
    cpu_dispatch!(parts[0].0, _v => {
        fn pick<T: WithDType + IntoCpuStorage>(_: &[T], parts: &[(&CpuStorage, &Layout)], dim: usize) -> CpuStorage { cat_t::<T>(parts, dim) }
        pick(_v, parts, dim)
    })
}
