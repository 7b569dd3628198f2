//! Running sums and products along a dim (torch.cumsum, torch.cumprod), as a composite: the
//! Hillis-Steele scan, log2(n) passes that each combine every element with the one `step`
//! before it (the identity where there is none). Each pass is a `cat` and one elementwise op, so
//! the scan runs on every device and differentiates through those ops, in O(N log n) work.

use crate::layout::resolve_dim;
use crate::{DType, Result, Tensor};

impl Tensor {
    /// The running sum along `dim` (torch.cumsum); bool counts as I64, as in PyTorch.
    pub fn cumsum(&self, dim: isize) -> Result<Tensor> {
        self.scan("cumsum", dim, 0.0, Tensor::add)
    }

    /// The running product along `dim` (torch.cumprod).
    pub fn cumprod(&self, dim: isize) -> Result<Tensor> {
        self.scan("cumprod", dim, 1.0, Tensor::mul)
    }

    fn scan(
        &self,
        op: &'static str,
        dim: isize,
        identity: f64,
        combine: fn(&Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let d = resolve_dim(op, dim, self.rank())?;
        // Half precisions accumulate in f32 and round once at the end, as PyTorch's scans do:
        // rounding after each of the log2(n) passes would compound.
        let (mut y, out_dtype) = match self.dtype() {
            DType::Bool => (self.to_dtype(DType::I64)?, DType::I64),
            DType::BF16 | DType::F16 => (self.to_dtype(DType::F32)?, self.dtype()),
            dtype => (self.clone(), dtype),
        };
        let n = self.shape()[d];
        let mut step = 1;
        while step < n {
            let mut shape = y.shape().to_vec();
            shape[d] = step;
            let fill = Tensor::full(identity, &shape, y.dtype(), y.device())?;
            let before = Tensor::cat(&[fill, y.narrow(d as isize, 0, n - step)?], d as isize)?;
            y = combine(&y, &before)?;
            step *= 2;
        }
        y.to_dtype(out_dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumsum_and_cumprod_run_along_the_dim() {
        let x = Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6.], &[2, 3]).unwrap();
        assert_eq!(
            x.cumsum(1).unwrap().to_vec_f32().unwrap(),
            [1., 3., 6., 4., 9., 15.]
        );
        assert_eq!(
            x.cumsum(0).unwrap().to_vec_f32().unwrap(),
            [1., 2., 3., 5., 7., 9.]
        );
        assert_eq!(
            x.cumprod(-1).unwrap().to_vec_f32().unwrap(),
            [1., 2., 6., 4., 20., 120.]
        );
    }

    #[test]
    fn a_long_scan_equals_the_sequential_sum() {
        let n = 1000;
        let x = Tensor::from_vec((0..n).map(|i| (i % 7) as i64).collect(), &[n]).unwrap();
        let mut running = 0;
        let expected: Vec<f64> = (0..n)
            .map(|i| {
                running += (i % 7) as i64;
                running as f64
            })
            .collect();
        assert_eq!(x.cumsum(0).unwrap().to_vec_f64().unwrap(), expected);
    }

    #[test]
    fn a_bool_cumsum_counts() {
        let x = Tensor::from_vec(vec![true, false, true], &[3]).unwrap();
        let c = x.cumsum(0).unwrap();
        assert_eq!(c.dtype(), DType::I64);
        assert_eq!(c.to_vec_f64().unwrap(), [1., 1., 2.]);
    }
}
