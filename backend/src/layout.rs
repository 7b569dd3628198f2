//! A view's geometry: shape, strides (in elements) and the offset of its first element.
//! Views (reshape, transpose, narrow, expand) only make a new layout over the same storage.

use crate::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc *= d.max(1);
    }
    strides
}

/// Resolves a possibly negative dimension index against a rank.
pub fn resolve_dim(op: &'static str, dim: isize, rank: usize) -> Result<usize> {
    let r = rank as isize;
    let d = if dim < 0 { dim + r } else { dim };
    // A 0-d tensor has no dims to name, so every dim is out of range for it.
    if d < 0 || d >= r {
        return Err(Error::DimOutOfRange { op, dim, rank });
    }
    Ok(d as usize)
}

/// NumPy broadcasting of two shapes.
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(Error::BroadcastMismatch {
                    op,
                    lhs: a.to_vec(),
                    rhs: b.to_vec(),
                })
            }
        };
    }
    Ok(out)
}

impl Layout {
    pub fn contiguous(shape: &[usize]) -> Self {
        Layout {
            strides: contiguous_strides(shape),
            shape: shape.to_vec(),
            offset: 0,
        }
    }

    /// A fresh dense layout of this shape whose dims are laid out in the order of this view's
    /// strides (largest first), as `torch.empty_like` preserves a permuted tensor's format: a
    /// kernel writing it walks memory in the same order as it reads this view.
    pub fn dense_like(&self) -> Layout {
        // A broadcast dim (stride 0) goes outermost, so it never displaces the unit-stride dim.
        let mut order: Vec<usize> = (0..self.rank()).collect();
        order.sort_by_key(|&d| match self.strides[d] {
            0 => std::cmp::Reverse(usize::MAX),
            s => std::cmp::Reverse(s),
        });
        let mut strides = vec![0; self.rank()];
        let mut next = 1;
        for &d in order.iter().rev() {
            strides[d] = next;
            next *= self.shape[d];
        }
        Layout::new(self.shape.clone(), strides, 0)
    }

    /// True when the elements fill `offset..offset + numel` without gaps in some dim order (a
    /// contiguous tensor, or a permutation of one such as channels-last images). Elementwise
    /// kernels then walk the storage flat and the result keeps the same layout.
    pub fn is_dense(&self) -> bool {
        let dense = self.dense_like();
        self.shape
            .iter()
            .zip(self.strides.iter().zip(dense.strides()))
            .all(|(&d, (&s, &want))| d == 1 || s == want)
    }

    /// Channels-last images: [N, C, H, W] laid out as [N, H, W, C], densely, from `offset`.
    pub fn is_channels_last(&self) -> bool {
        self.rank() == 4
            && self.is_dense()
            && *self == Self::channels_last(&self.shape).at(self.offset)
    }

    /// The dense channels-last layout of images of `shape` [N, C, H, W].
    pub fn channels_last(shape: &[usize]) -> Layout {
        Layout::contiguous(&[shape[0], shape[2], shape[3], shape[1]]).permuted(&[0, 3, 1, 2])
    }

    /// This layout from another storage offset.
    pub fn at(&self, offset: usize) -> Layout {
        Layout {
            offset,
            ..self.clone()
        }
    }

    pub fn new(shape: Vec<usize>, strides: Vec<usize>, offset: usize) -> Self {
        Layout {
            shape,
            strides,
            offset,
        }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    pub fn offset(&self) -> usize {
        self.offset
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the elements sit in row-major order without gaps, from `offset`.
    pub fn is_contiguous(&self) -> bool {
        let mut acc = 1;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d != 1 && s != acc {
                return false;
            }
            acc *= d;
        }
        true
    }

    /// The contiguous element range `offset..offset+numel` when the layout is contiguous.
    pub fn contiguous_range(&self) -> Option<std::ops::Range<usize>> {
        self.is_contiguous()
            .then(|| self.offset..self.offset + self.numel())
    }

    /// The largest storage index this layout can touch, plus one (0 for an empty view).
    pub fn storage_extent(&self) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        self.offset
            + self
                .shape
                .iter()
                .zip(&self.strides)
                .map(|(&d, &s)| (d - 1) * s)
                .sum::<usize>()
            + 1
    }

    /// The view as rows of its last dim: (rows, cols, row stride) when the last dim is dense
    /// and the leading dims step evenly over whole rows, non-overlapping (a contiguous view,
    /// one part of each row of a wider matrix, or rows at a stride); None otherwise.
    pub fn as_rows(&self) -> Option<(usize, usize, usize)> {
        let r = self.rank();
        let cols = *self.shape.last()?;
        if cols > 1 && self.strides[r - 1] != 1 {
            return None;
        }
        let lead: Vec<(usize, usize)> = self.shape[..r - 1]
            .iter()
            .zip(&self.strides[..r - 1])
            .filter(|(&n, _)| n != 1)
            .map(|(&n, &s)| (n, s))
            .collect();
        let Some(&(_, ld)) = lead.last() else {
            return Some((1, cols, cols));
        };
        let even = lead.windows(2).all(|w| w[0].1 == w[1].1 * w[1].0);
        (even && ld >= cols).then(|| (lead.iter().map(|&(n, _)| n).product(), cols, ld))
    }

    /// A reshape that keeps the storage, possible when the layout is contiguous.
    pub fn reshaped(&self, shape: &[usize]) -> Option<Layout> {
        self.is_contiguous().then(|| Layout {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: self.offset,
        })
    }

    /// A contiguous matrix (or batch of them) seen with its last two dims swapped: the Wᵀ of
    /// x Wᵀ, which casts and gradients keep in W's memory order.
    pub fn is_transposed_contiguous(&self) -> bool {
        let r = self.rank();
        if r < 2 || self.is_contiguous() {
            return false;
        }
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        self.permuted(&perm).is_contiguous()
    }

    pub fn permuted(&self, perm: &[usize]) -> Layout {
        Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    pub fn narrowed(&self, dim: usize, start: usize, len: usize) -> Layout {
        let mut l = self.clone();
        l.offset += start * self.strides[dim];
        l.shape[dim] = len;
        l
    }

    /// Broadcast to a larger shape: new or size-1 dims get stride 0.
    pub fn broadcast_to(&self, op: &'static str, shape: &[usize]) -> Result<Layout> {
        if shape.len() < self.rank() {
            return Err(Error::BroadcastMismatch {
                op,
                lhs: self.shape.clone(),
                rhs: shape.to_vec(),
            });
        }
        let extra = shape.len() - self.rank();
        let mut strides = vec![0; shape.len()];
        for i in 0..self.rank() {
            let (have, want) = (self.shape[i], shape[extra + i]);
            strides[extra + i] = if have == want {
                self.strides[i]
            } else if have == 1 {
                0
            } else {
                return Err(Error::BroadcastMismatch {
                    op,
                    lhs: self.shape.clone(),
                    rhs: shape.to_vec(),
                });
            };
        }
        Ok(Layout {
            shape: shape.to_vec(),
            strides,
            offset: self.offset,
        })
    }

    pub fn squeezed(&self, dim: usize) -> Layout {
        let mut l = self.clone();
        l.shape.remove(dim);
        l.strides.remove(dim);
        l
    }

    pub fn unsqueezed(&self, dim: usize) -> Layout {
        let mut l = self.clone();
        let stride = if dim < self.rank() {
            self.strides[dim] * self.shape[dim]
        } else {
            1
        };
        l.shape.insert(dim, 1);
        l.strides.insert(dim, stride);
        l
    }

    /// Calls `f` with the storage index of every element, in row-major order. The innermost
    /// dimension runs as a plain loop, which keeps strided copies reasonably fast.
    pub fn for_each_index(&self, mut f: impl FnMut(usize)) {
        let numel = self.numel();
        if numel == 0 {
            return;
        }
        if let Some(r) = self.contiguous_range() {
            r.for_each(f);
            return;
        }
        let rank = self.rank();
        let (inner_len, inner_stride) = (self.shape[rank - 1], self.strides[rank - 1]);
        let outer = &self.shape[..rank - 1];
        let mut idx = vec![0usize; outer.len()];
        let mut base = self.offset;
        loop {
            for i in 0..inner_len {
                f(base + i * inner_stride);
            }
            // Advance the odometer over the outer dims.
            let mut d = outer.len();
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                idx[d] += 1;
                base += self.strides[d];
                if idx[d] < outer[d] {
                    break;
                }
                base -= self.strides[d] * idx[d];
                idx[d] = 0;
            }
        }
    }

    /// Storage indices of the first element of each `row` of the last dimension, in order,
    /// together with that dimension's length and stride.
    pub fn row_starts(&self) -> (Vec<usize>, usize, usize) {
        if self.rank() == 0 {
            return (vec![self.offset], 1, 1);
        }
        let outer = self.squeezed(self.rank() - 1);
        let mut starts = Vec::with_capacity(outer.numel());
        outer.for_each_index(|i| starts.push(i));
        (
            starts,
            self.shape[self.rank() - 1],
            self.strides[self.rank() - 1],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposed_layout_visits_elements_in_row_major_order() {
        let l = Layout::contiguous(&[2, 3]).permuted(&[1, 0]);
        let mut seen = vec![];
        l.for_each_index(|i| seen.push(i));
        assert_eq!(seen, vec![0, 3, 1, 4, 2, 5]);
        assert!(!l.is_contiguous());
    }

    #[test]
    fn dense_like_keeps_a_permuted_views_dim_order() {
        // [B, T, H, D] seen as [B, H, T, D]: a fresh buffer laid out token-major again.
        let l = Layout::contiguous(&[2, 5, 3, 4]).permuted(&[0, 2, 1, 3]);
        let d = l.dense_like();
        assert_eq!(d.shape(), &[2, 3, 5, 4]);
        assert_eq!(d.strides(), &[60, 4, 12, 1]);
        assert_eq!(d.offset(), 0);
        let narrowed = Layout::contiguous(&[4, 6]).narrowed(1, 1, 3);
        assert_eq!(narrowed.dense_like().strides(), &[3, 1]);
        // An expanded [3, 4] as [2, 3, 4]: the broadcast dim goes outermost.
        let expanded = Layout::contiguous(&[3, 4])
            .broadcast_to("t", &[2, 3, 4])
            .unwrap();
        assert_eq!(expanded.dense_like().strides(), &[12, 4, 1]);
    }

    #[test]
    fn dense_layouts_are_permutations_of_contiguous_ones() {
        let nhwc = Layout::channels_last(&[2, 3, 4, 5]);
        assert_eq!(nhwc.strides(), &[60, 1, 15, 3]);
        assert!(nhwc.is_dense() && nhwc.is_channels_last());
        assert!(Layout::contiguous(&[2, 3, 4, 5]).is_dense());
        assert!(!Layout::contiguous(&[2, 3, 4, 5]).is_channels_last());
        // A channel slice of channels-last images has gaps.
        assert!(!nhwc.narrowed(1, 1, 2).is_dense());
        // A broadcast view repeats elements.
        let expanded = Layout::contiguous(&[3, 1])
            .broadcast_to("t", &[3, 4])
            .unwrap();
        assert!(!expanded.is_dense());
    }

    #[test]
    fn broadcasting_gives_zero_strides_and_rejects_mismatches() {
        let l = Layout::contiguous(&[3, 1])
            .broadcast_to("t", &[2, 3, 4])
            .unwrap();
        assert_eq!(l.strides(), &[0, 1, 0]);
        assert!(Layout::contiguous(&[3]).broadcast_to("t", &[4]).is_err());
        assert_eq!(
            broadcast_shapes("t", &[2, 1, 4], &[3, 1]).unwrap(),
            vec![2, 3, 4]
        );
        assert!(broadcast_shapes("t", &[2], &[3]).is_err());
    }

    #[test]
    fn negative_dims_resolve_and_out_of_range_dims_fail() {
        assert_eq!(resolve_dim("t", -1, 3).unwrap(), 2);
        assert!(resolve_dim("t", 3, 3).is_err());
        assert!(resolve_dim("t", -4, 3).is_err());
    }
}
