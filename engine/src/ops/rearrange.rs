//! Ops that move elements around, built from `narrow`, `cat` and `index_select`: flip, roll,
//! repeat_interleave, pad and masked_select. They are composites (`ops::table`): the gradient
//! and every device come from the ops they are made of, so they need no kernel of their own.

use crate::layout::resolve_dim;
use crate::{DType, Device, Error, Result, Tensor};

/// How `pad` fills the new border (torch.nn.functional.pad's modes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadMode {
    /// Every new element is the value.
    Constant(f64),
    /// Mirrored without repeating the edge: [a, b, c] padded by 2 reads [c, b, a, b, c, b, a].
    Reflect,
    /// The edge element repeated.
    Replicate,
    /// Wrapped around: the other end's elements.
    Circular,
}

impl PadMode {
    pub fn parse(mode: &str, value: f64) -> Option<PadMode> {
        Some(match mode {
            "constant" => PadMode::Constant(value),
            "reflect" => PadMode::Reflect,
            "replicate" => PadMode::Replicate,
            "circular" => PadMode::Circular,
            _ => return None,
        })
    }
}

/// Positions `0..n` as an I64 index tensor on `device`.
fn positions(values: Vec<i64>, device: Device) -> Result<Tensor> {
    let n = values.len();
    Tensor::from_vec(values, &[n])?.to_device(device)
}

impl Tensor {
    /// The elements in reverse order along each of `dims` (torch.flip).
    pub fn flip(&self, dims: &[isize]) -> Result<Tensor> {
        let mut out = self.clone();
        for &dim in dims {
            let d = resolve_dim("flip", dim, self.rank())?;
            let n = self.shape()[d] as i64;
            if n > 1 {
                let reversed = positions((0..n).rev().collect(), self.device())?;
                out = out.index_select(d as isize, &reversed)?;
            }
        }
        Ok(out)
    }

    /// The elements shifted by `shift` along `dim`, those pushed off one end coming back at the
    /// other (torch.roll with one dim).
    pub fn roll(&self, shift: i64, dim: isize) -> Result<Tensor> {
        let d = resolve_dim("roll", dim, self.rank())?;
        let n = self.shape()[d];
        if n == 0 {
            return Ok(self.clone());
        }
        let s = shift.rem_euclid(n as i64) as usize;
        if s == 0 {
            return Ok(self.clone());
        }
        let d = d as isize;
        Tensor::cat(&[self.narrow(d, n - s, s)?, self.narrow(d, 0, n - s)?], d)
    }

    /// Each element repeated `repeats` times in place along `dim` (torch.repeat_interleave):
    /// [a, b] with 2 gives [a, a, b, b].
    pub fn repeat_interleave(&self, repeats: usize, dim: isize) -> Result<Tensor> {
        let d = resolve_dim("repeat_interleave", dim, self.rank())?;
        let n = self.shape()[d] as i64;
        let index = (0..n)
            .flat_map(|i| std::iter::repeat_n(i, repeats))
            .collect();
        self.index_select(d as isize, &positions(index, self.device())?)
    }

    /// Pads the last dims as torch.nn.functional.pad: `pads` = [left, right] for the last dim,
    /// then [top, bottom] for the one before, and so on.
    pub fn pad(&self, pads: &[usize], mode: PadMode) -> Result<Tensor> {
        if !pads.len().is_multiple_of(2) || pads.len() / 2 > self.rank() {
            return Err(Error::invalid(
                "pad",
                format!(
                    "pads come in (before, after) pairs for at most the tensor's {} dims, got {pads:?}",
                    self.rank()
                ),
            ));
        }
        let mut out = self.clone();
        for (i, pair) in pads.chunks(2).enumerate() {
            let d = self.rank() - 1 - i;
            out = out.pad_dim(d, pair[0], pair[1], mode)?;
        }
        Ok(out)
    }

    fn pad_dim(&self, d: usize, before: usize, after: usize, mode: PadMode) -> Result<Tensor> {
        if before == 0 && after == 0 {
            return Ok(self.clone());
        }
        let n = self.shape()[d];
        if let PadMode::Constant(value) = mode {
            let border = |len: usize| -> Result<Tensor> {
                let mut shape = self.shape().to_vec();
                shape[d] = len;
                Tensor::full(value, &shape, self.dtype(), self.device())
            };
            return Tensor::cat(&[border(before)?, self.clone(), border(after)?], d as isize);
        }
        let wide = match mode {
            PadMode::Reflect => before.max(after) < n,
            _ => n > 0,
        };
        if !wide {
            return Err(Error::invalid(
                "pad",
                format!(
                    "{mode:?} padding of ({before}, {after}) needs dim {d} to be longer, it has {n}"
                ),
            ));
        }
        let n = n as i64;
        let source = |i: i64| -> i64 {
            match mode {
                PadMode::Reflect if i < 0 => -i,
                PadMode::Reflect if i >= n => 2 * (n - 1) - i,
                PadMode::Replicate => i.clamp(0, n - 1),
                PadMode::Circular => i.rem_euclid(n),
                _ => i,
            }
        };
        let index = (-(before as i64)..n + after as i64).map(source).collect();
        self.index_select(d as isize, &positions(index, self.device())?)
    }

    /// The elements where `mask` (Bool, broadcast with this tensor) is true, as one dimension in
    /// row-major order (torch.masked_select, `x[mask]`). The mask is read on the host: the
    /// output's length depends on it.
    pub fn masked_select(&self, mask: &Tensor) -> Result<Tensor> {
        if mask.dtype() != DType::Bool {
            return Err(Error::invalid(
                "masked_select",
                format!(
                    "the mask must be bool (a comparison such as x > 0.0), got {}",
                    mask.dtype()
                ),
            ));
        }
        let shape = crate::layout::broadcast_shapes("masked_select", self.shape(), mask.shape())?;
        let values = self.broadcast_to(&shape)?.contiguous()?.flatten()?;
        let keep = mask.broadcast_to(&shape)?.to_vec_f64()?;
        let index = keep
            .iter()
            .enumerate()
            .filter(|(_, &k)| k != 0.0)
            .map(|(i, _)| i as i64)
            .collect();
        values.index_select(0, &positions(index, self.device())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f32], shape: &[usize]) -> Tensor {
        Tensor::from_vec(v.to_vec(), shape).unwrap()
    }

    fn values(x: Result<Tensor>) -> Vec<f32> {
        x.unwrap().to_vec_f32().unwrap()
    }

    #[test]
    fn flip_reverses_each_given_dim() {
        let x = t(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
        assert_eq!(values(x.flip(&[1])), [3., 2., 1., 6., 5., 4.]);
        assert_eq!(values(x.flip(&[0, -1])), [6., 5., 4., 3., 2., 1.]);
    }

    #[test]
    fn roll_wraps_elements_around() {
        let x = t(&[1., 2., 3., 4.], &[4]);
        assert_eq!(values(x.roll(1, 0)), [4., 1., 2., 3.]);
        assert_eq!(values(x.roll(-1, 0)), [2., 3., 4., 1.]);
        assert_eq!(values(x.roll(8, 0)), [1., 2., 3., 4.]);
    }

    #[test]
    fn repeat_interleave_repeats_each_element_in_place() {
        let x = t(&[1., 2., 3., 4.], &[2, 2]);
        assert_eq!(
            values(x.repeat_interleave(2, 0)),
            [1., 2., 1., 2., 3., 4., 3., 4.]
        );
        assert_eq!(
            values(x.repeat_interleave(2, 1)),
            [1., 1., 2., 2., 3., 3., 4., 4.]
        );
    }

    #[test]
    fn pad_fills_borders_as_torch_does() {
        let x = t(&[1., 2., 3.], &[1, 3]);
        assert_eq!(
            values(x.pad(&[1, 2], PadMode::Constant(9.0))),
            [9., 1., 2., 3., 9., 9.]
        );
        assert_eq!(
            values(x.pad(&[2, 2], PadMode::Reflect)),
            [3., 2., 1., 2., 3., 2., 1.]
        );
        assert_eq!(
            values(x.pad(&[2, 1], PadMode::Replicate)),
            [1., 1., 1., 2., 3., 3.]
        );
        assert_eq!(
            values(x.pad(&[1, 2], PadMode::Circular)),
            [3., 1., 2., 3., 1., 2.]
        );
        let padded = x.pad(&[0, 0, 1, 0], PadMode::Constant(0.0)).unwrap();
        assert_eq!(padded.shape(), &[2, 3]);
    }

    #[test]
    fn pad_refuses_what_it_cannot_do() {
        let x = t(&[1., 2., 3.], &[3]);
        assert!(x.pad(&[1], PadMode::Reflect).is_err());
        let err = x.pad(&[3, 0], PadMode::Reflect).unwrap_err().to_string();
        assert!(err.contains("needs dim 0 to be longer, it has 3"), "{err}");
    }

    #[test]
    fn masked_select_keeps_the_true_elements_in_order() {
        let x = t(&[1., -2., 3., -4.], &[2, 2]);
        let mask = x.gt_scalar(0.0).unwrap();
        assert_eq!(values(x.masked_select(&mask)), [1., 3.]);
        // A mask that broadcasts: one row chooses columns of every row.
        let cols = Tensor::from_vec(vec![false, true], &[2]).unwrap();
        assert_eq!(values(x.masked_select(&cols)), [-2., -4.]);
        assert!(x.masked_select(&x).is_err());
    }
}
