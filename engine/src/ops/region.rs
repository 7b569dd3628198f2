//! Indexing several leading dims at once, as PyTorch writes `x[0, 1:3]` and `x[0, 1:3] = v`:
//! each axis is an index (its dim is dropped), a range (clamped as a slice is) or the whole dim.
//! Reading gives a view; writing goes in place into a view, or builds a new tensor from the
//! untouched parts and the value, so gradients reach both.

use crate::{Error, Result, Tensor};

/// One axis of a multi-axis index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// One position; negative counts from the end; the dim is dropped.
    Index(i64),
    /// Positions start..end, negative counting from the end, clamped to the dim as Python's
    /// slices are (an empty range is allowed).
    Range(i64, i64),
    /// The whole dim (`:`).
    Full,
}

/// An axis resolved against its dim: where it starts, how long it is, whether it stays.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: usize,
    len: usize,
    kept: bool,
}

/// The spans of `axes` over `shape`, or an error naming the axis that does not fit.
fn spans(shape: &[usize], axes: &[Axis], what: &'static str) -> Result<Vec<Span>> {
    if shape.is_empty() && !axes.is_empty() {
        return Err(Error::invalid(
            what,
            "cannot index a 0-d tensor; use item()",
        ));
    }
    if axes.len() > shape.len() {
        return Err(Error::invalid(
            what,
            format!(
                "{} indices for a tensor of {} dims {shape:?}",
                axes.len(),
                shape.len()
            ),
        ));
    }
    axes.iter()
        .zip(shape)
        .enumerate()
        .map(|(dim, (axis, &n))| {
            let n = n as i64;
            let from_end = |i: i64| if i < 0 { i + n } else { i };
            Ok(match *axis {
                Axis::Index(i) => {
                    let j = from_end(i);
                    if !(0..n).contains(&j) {
                        return Err(Error::invalid(
                            what,
                            format!("index {i} is out of range for dim {dim} of size {n}"),
                        ));
                    }
                    Span {
                        start: j as usize,
                        len: 1,
                        kept: false,
                    }
                }
                Axis::Range(a, b) => {
                    let (a, b) = (from_end(a).clamp(0, n), from_end(b).clamp(0, n));
                    Span {
                        start: a as usize,
                        len: (b - a).max(0) as usize,
                        kept: true,
                    }
                }
                Axis::Full => Span {
                    start: 0,
                    len: n as usize,
                    kept: true,
                },
            })
        })
        .collect()
}

impl Tensor {
    /// `x[axes]`: the view the axes select, with the indexed dims dropped.
    pub fn region(&self, axes: &[Axis]) -> Result<Tensor> {
        let spans = spans(self.shape(), axes, "x[...]")?;
        let mut out = self.narrowed(&spans)?;
        for (d, s) in spans.iter().enumerate().rev() {
            if !s.kept {
                out = out.squeeze(d as isize)?;
            }
        }
        Ok(out)
    }

    /// `x[axes] = value` in place: every handle on this tensor sees it.
    pub fn set_region_(&self, axes: &[Axis], value: &Tensor) -> Result<()> {
        let spans = spans(self.shape(), axes, "x[...] = v")?;
        let target = self.narrowed(&spans)?;
        target.copy_(&self.region_value(&spans, target.shape(), value)?)
    }

    /// `x[axes] = value` as a new tensor: the parts outside the region are this tensor's, the
    /// region is `value` broadcast to it (cast to this dtype), so gradients reach both.
    pub fn with_region(&self, axes: &[Axis], value: &Tensor) -> Result<Tensor> {
        let spans = spans(self.shape(), axes, "x[...] = v")?;
        let shape = self.narrowed(&spans)?.shape().to_vec();
        let value = self.region_value(&spans, &shape, value)?;
        self.spliced(&spans, 0, value)
    }

    /// This tensor narrowed by each span, every dim kept.
    fn narrowed(&self, spans: &[Span]) -> Result<Tensor> {
        let mut out = self.clone();
        for (d, s) in spans.iter().enumerate() {
            out = out.narrow(d as isize, s.start, s.len)?;
        }
        Ok(out)
    }

    /// `value` as the region of `shape` (every dim kept): broadcast, as PyTorch does, to the
    /// shape the read `x[axes]` has, then given back the indexed dims.
    fn region_value(&self, spans: &[Span], shape: &[usize], value: &Tensor) -> Result<Tensor> {
        let read: Vec<usize> = shape
            .iter()
            .enumerate()
            .filter(|&(d, _)| spans.get(d).is_none_or(|s| s.kept))
            .map(|(_, &n)| n)
            .collect();
        let mut value = value.to_dtype(self.dtype())?.to_device(self.device())?;
        // PyTorch drops a value's leading dims of size 1 that the read shape has no room for
        // (`x[0] = y` with y [1, 4] and a row of [4]).
        while value.rank() > read.len() && value.shape()[0] == 1 {
            value = value.squeeze(0)?;
        }
        let mut value = value.expand(&read).map_err(|_| {
            Error::invalid(
                "x[...] = v",
                format!(
                    "a value of shape {:?} does not broadcast to the indexed shape {read:?}",
                    value.shape()
                ),
            )
        })?;
        for (d, s) in spans.iter().enumerate() {
            if !s.kept {
                value = value.unsqueeze(d as isize)?;
            }
        }
        Ok(value)
    }

    /// This tensor with the region of `spans` (from dim `d` on) replaced by `value` (already
    /// the region's shape): along dim `d`, the part before, the rest spliced recursively, the
    /// part after.
    fn spliced(&self, spans: &[Span], d: usize, value: Tensor) -> Result<Tensor> {
        let Some((s, rest)) = spans.split_first() else {
            return Ok(value);
        };
        let n = self.shape()[d];
        let inner = self
            .narrow(d as isize, s.start, s.len)?
            .spliced(rest, d + 1, value)?;
        if s.start == 0 && s.len == n {
            return Ok(inner);
        }
        let mut parts = Vec::with_capacity(3);
        if s.start > 0 {
            parts.push(self.narrow(d as isize, 0, s.start)?);
        }
        parts.push(inner);
        if s.start + s.len < n {
            parts.push(self.narrow(d as isize, s.start + s.len, n - s.start - s.len)?);
        }
        Tensor::cat(&parts, d as isize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn grid() -> Tensor {
        Tensor::arange(0.0, 12.0, 1.0, DType::F32)
            .unwrap()
            .reshape(&[3, 4])
            .unwrap()
    }

    #[test]
    fn a_region_drops_indexed_dims_and_keeps_ranges() {
        let x = grid();
        let y = x.region(&[Axis::Index(-1), Axis::Range(1, 3)]).unwrap();
        assert_eq!(y.shape(), &[2]);
        assert_eq!(y.to_vec_f32().unwrap(), [9.0, 10.0]);
        let col = x.region(&[Axis::Full, Axis::Index(2)]).unwrap();
        assert_eq!(col.to_vec_f32().unwrap(), [2.0, 6.0, 10.0]);
        let err = x.region(&[Axis::Index(0), Axis::Index(4)]).err().unwrap();
        assert!(
            err.to_string()
                .contains("index 4 is out of range for dim 1 of size 4"),
            "{err}"
        );
        let err = x.region(&[Axis::Full; 3]).err().unwrap();
        assert!(
            err.to_string().contains("3 indices for a tensor of 2 dims"),
            "{err}"
        );
    }

    #[test]
    fn a_region_written_in_place_and_as_a_new_tensor_agree() {
        let axes = [Axis::Range(0, 2), Axis::Index(1)];
        let value = Tensor::from_vec(vec![-1f32, -2.0], &[2]).unwrap();
        let fresh = grid().with_region(&axes, &value).unwrap();
        let x = grid();
        x.set_region_(&axes, &value).unwrap();
        let want = [0., -1., 2., 3., 4., -2., 6., 7., 8., 9., 10., 11.];
        assert_eq!(fresh.to_vec_f32().unwrap(), want);
        assert_eq!(x.to_vec_f32().unwrap(), want);
        let err = grid().with_region(&[Axis::Index(0)], &value).err().unwrap();
        assert!(
            err.to_string()
                .contains("a value of shape [2] does not broadcast to the indexed shape [4]"),
            "{err}"
        );
        // A batch of one written into a row: its leading 1 goes, as in PyTorch.
        let x = grid();
        let one_row = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[1, 4]).unwrap();
        x.set_region_(&[Axis::Index(2)], &one_row).unwrap();
        assert_eq!(
            x.region(&[Axis::Index(2)]).unwrap().to_vec_f32().unwrap(),
            [1., 2., 3., 4.]
        );
        let scalar = Tensor::from_vec(vec![5f32], &[]).unwrap();
        let err = scalar.region(&[Axis::Index(0)]).err().unwrap();
        assert!(
            err.to_string().contains("cannot index a 0-d tensor"),
            "{err}"
        );
    }

    #[test]
    fn gradients_reach_the_value_and_the_rest_of_a_region_write() {
        let x = grid().requires_grad_().unwrap();
        let v = Tensor::from_vec(vec![5f32], &[1])
            .unwrap()
            .requires_grad_()
            .unwrap();
        let y = x
            .mul_scalar(2.0)
            .unwrap()
            .with_region(&[Axis::Index(1), Axis::Range(1, 3)], &v)
            .unwrap();
        y.sum().unwrap().backward().unwrap();
        assert_eq!(v.grad().unwrap().to_vec_f32().unwrap(), [2.0]);
        let gx = x.grad().unwrap().to_vec_f32().unwrap();
        assert_eq!(gx, [2., 2., 2., 2., 2., 0., 0., 2., 2., 2., 2., 2.]);
    }
}
