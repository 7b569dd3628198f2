//! `unique`: the distinct values of a tensor, sorted, as `torch.unique(sorted=True)`, with
//! their counts when asked. The values are compared on the host (a CUDA tensor's are copied
//! there; there is no kernel); the result is picked from the tensor with `index_select` on its
//! own device, so it keeps the dtype exactly. Not differentiable, as in PyTorch.
//!
//! Each NaN is a value of its own (NaN equals nothing), as in PyTorch; they come last.

use super::host_keys::HostKeys;
use crate::{Result, Tensor};

impl Tensor {
    /// The distinct values of the flattened tensor, ascending, as a 1-D tensor of its dtype.
    pub fn unique(&self) -> Result<Tensor> {
        self.unique_counts().map(|(values, _)| values)
    }

    /// `(values, counts)`: the distinct values, ascending, and how often each occurs (I64).
    pub fn unique_counts(&self) -> Result<(Tensor, Tensor)> {
        let flat = self.detach().flatten()?;
        let keys = HostKeys::read(&flat)?;
        let mut order: Vec<usize> = (0..keys.len()).collect();
        // Ties by position keep the sort deterministic (and the first occurrence first).
        order.sort_unstable_by(|&a, &b| keys.cmp(a, b).then(a.cmp(&b)));
        let mut firsts: Vec<i64> = Vec::new();
        let mut counts: Vec<i64> = Vec::new();
        let mut previous: Option<usize> = None;
        for &i in &order {
            match (previous, counts.last_mut()) {
                (Some(p), Some(count)) if keys.same(p, i) => *count += 1,
                _ => {
                    firsts.push(i as i64);
                    counts.push(1);
                }
            }
            previous = Some(i);
        }
        let n = firsts.len();
        let device = flat.device();
        let firsts = Tensor::from_vec(firsts, &[n])?.to_device(device)?;
        let values = flat.index_select(0, &firsts)?;
        let counts = Tensor::from_vec(counts, &[n])?.to_device(device)?;
        Ok((values, counts))
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    #[test]
    fn unique_gives_the_sorted_distinct_values_in_the_input_dtype() {
        let x = Tensor::from_vec(vec![3i64, 1, 3, 2, 1, 3], &[2, 3]).unwrap();
        let u = x.unique().unwrap();
        assert_eq!(u.dtype(), DType::I64);
        assert_eq!(u.shape(), &[3]);
        assert_eq!(u.to_vec::<i64>().unwrap(), [1, 2, 3]);
    }

    #[test]
    fn unique_counts_counts_each_value() {
        let x = Tensor::from_vec(vec![0.5f32, -1.0, 0.5, 0.5], &[4]).unwrap();
        let (v, c) = x.unique_counts().unwrap();
        assert_eq!(v.to_vec::<f32>().unwrap(), [-1.0, 0.5]);
        assert_eq!(c.to_vec::<i64>().unwrap(), [1, 3]);
        assert_eq!(c.dtype(), DType::I64);
    }

    #[test]
    fn unique_keeps_each_nan_apart_and_last() {
        let x = Tensor::from_vec(vec![f32::NAN, 1.0, f32::NAN, 1.0], &[4]).unwrap();
        let (v, c) = x.unique_counts().unwrap();
        let v = v.to_vec::<f32>().unwrap();
        assert_eq!(v.len(), 3);
        assert!(v[0] == 1.0 && v[1].is_nan() && v[2].is_nan());
        assert_eq!(c.to_vec::<i64>().unwrap(), [2, 1, 1]);
    }

    #[test]
    fn unique_of_an_empty_tensor_is_empty() {
        let x = Tensor::from_vec(Vec::<f32>::new(), &[0, 3]).unwrap();
        let (v, c) = x.unique_counts().unwrap();
        assert_eq!((v.shape(), c.shape()), (&[0usize][..], &[0usize][..]));
    }

    #[test]
    fn unique_of_bools_gives_false_then_true() {
        let x = Tensor::from_vec(vec![true, true, false], &[3]).unwrap();
        let u = x.unique().unwrap();
        assert_eq!(u.dtype(), DType::Bool);
        assert_eq!(u.to_vec::<i64>().unwrap(), [0, 1]);
    }
}
