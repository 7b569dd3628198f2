//! `topk`: the k largest (or smallest) values along a dim with their indices, as `torch.topk`
//! with `sorted=True`. It shares `sort`'s ordering (see `sort.rs`): found on the host (a CUDA
//! tensor's keys are copied there and the indices back), values gathered on the tensor's device
//! with gradients flowing through the gather. Among equal values the earlier index comes first.

use super::sort::ordered_along;
use crate::{Result, Tensor};

impl Tensor {
    /// `(values, indices)` of the `k` largest elements along `dim` (the smallest when
    /// `largest` is false), best first. `k` larger than the dim's size is an error.
    pub fn topk(&self, k: usize, dim: isize, largest: bool) -> Result<(Tensor, Tensor)> {
        ordered_along(self, "topk", dim, largest, Some(k))
    }
}

#[cfg(test)]
mod tests {
    use crate::Tensor;

    fn f32s(t: &Tensor) -> Vec<f32> {
        t.to_vec::<f32>().unwrap()
    }

    fn i64s(t: &Tensor) -> Vec<i64> {
        t.to_vec::<i64>().unwrap()
    }

    #[test]
    fn topk_returns_the_largest_first_with_their_indices() {
        let x = Tensor::from_vec(vec![1.0f32, 5.0, 3.0, 4.0, 2.0], &[5]).unwrap();
        let (v, i) = x.topk(3, 0, true).unwrap();
        assert_eq!(f32s(&v), [5.0, 4.0, 3.0]);
        assert_eq!(i64s(&i), [1, 3, 2]);
    }

    #[test]
    fn topk_smallest_along_a_negative_dim_of_a_matrix() {
        let x = Tensor::from_vec(vec![3i64, 1, 2, 9, 7, 8], &[2, 3]).unwrap();
        let (v, i) = x.topk(2, -1, false).unwrap();
        assert_eq!(v.shape(), &[2, 2]);
        assert_eq!(i64s(&v), [1, 2, 7, 8]);
        assert_eq!(i64s(&i), [1, 2, 1, 2]);
    }

    #[test]
    fn topk_breaks_ties_by_the_earlier_index() {
        let x = Tensor::from_vec(vec![2.0f32, 7.0, 2.0, 7.0, 2.0], &[5]).unwrap();
        let (_, i) = x.topk(3, 0, true).unwrap();
        assert_eq!(i64s(&i), [1, 3, 0]);
        let (_, i) = x.topk(2, 0, false).unwrap();
        assert_eq!(i64s(&i), [0, 2]);
    }

    #[test]
    fn topk_along_the_first_dim_of_a_matrix() {
        let x = Tensor::from_vec(vec![1.0f32, 6.0, 4.0, 2.0, 3.0, 5.0], &[3, 2]).unwrap();
        let (v, i) = x.topk(1, 0, true).unwrap();
        assert_eq!(v.shape(), &[1, 2]);
        assert_eq!(f32s(&v), [4.0, 6.0]);
        assert_eq!(i64s(&i), [1, 0]);
    }

    #[test]
    fn topk_with_k_above_the_dim_size_is_an_error_naming_k_and_the_size() {
        let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 3]).unwrap();
        let err = x.topk(4, 1, true).unwrap_err().to_string();
        assert!(err.starts_with("topk:"), "{err}");
        assert!(err.contains("k = 4") && err.contains("3 elements"), "{err}");
    }

    #[test]
    fn topk_with_a_dim_out_of_range_is_an_error() {
        let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
        let err = x.topk(1, 1, true).unwrap_err().to_string();
        assert!(err.contains("topk") && err.contains("dimension 1"), "{err}");
    }

    #[test]
    fn topk_of_zero_elements_and_of_an_empty_tensor_is_empty() {
        let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
        let (v, i) = x.topk(0, 0, true).unwrap();
        assert_eq!((v.shape(), i.shape()), (&[0usize][..], &[0usize][..]));
        let e = Tensor::from_vec(Vec::<f32>::new(), &[0, 4]).unwrap();
        let (v, _) = e.topk(2, 1, true).unwrap();
        assert_eq!(v.shape(), &[0, 2]);
    }

    #[test]
    fn topk_values_pass_the_gradient_to_the_chosen_elements() {
        let x = Tensor::from_vec(vec![1.0f32, 5.0, 3.0], &[3]).unwrap();
        x.set_requires_grad(true).unwrap();
        let (v, _) = x.topk(2, 0, true).unwrap();
        v.sum().unwrap().backward().unwrap();
        assert_eq!(f32s(&x.grad().unwrap()), [0.0, 1.0, 1.0]);
    }
}
