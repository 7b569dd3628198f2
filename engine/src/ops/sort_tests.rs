use crate::{DType, Tensor};

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn i64s(t: &Tensor) -> Vec<i64> {
    t.to_vec::<i64>().unwrap()
}

#[test]
fn sort_ascending_gives_values_and_their_original_indices() {
    let x = Tensor::from_vec(vec![3.0f32, 1.0, 2.0], &[3]).unwrap();
    let (v, i) = x.sort(0, false).unwrap();
    assert_eq!(f32s(&v), [1.0, 2.0, 3.0]);
    assert_eq!(i64s(&i), [1, 2, 0]);
    assert_eq!(i.dtype(), DType::I64);
}

#[test]
fn sort_is_stable_for_ties_in_both_directions() {
    let x = Tensor::from_vec(vec![1i64, 0, 1, 0, 1], &[5]).unwrap();
    let (_, up) = x.sort(0, false).unwrap();
    assert_eq!(i64s(&up), [1, 3, 0, 2, 4]);
    let (_, down) = x.sort(0, true).unwrap();
    assert_eq!(i64s(&down), [0, 2, 4, 1, 3]);
}

#[test]
fn sort_along_a_negative_dim_sorts_each_row() {
    let x = Tensor::from_vec(vec![3.0f32, 1.0, 2.0, 0.0, 5.0, 4.0], &[2, 3]).unwrap();
    let (v, i) = x.sort(-1, true).unwrap();
    assert_eq!(v.shape(), &[2, 3]);
    assert_eq!(f32s(&v), [3.0, 2.0, 1.0, 5.0, 4.0, 0.0]);
    assert_eq!(i64s(&i), [0, 2, 1, 1, 2, 0]);
}

#[test]
fn sort_along_the_first_dim_sorts_each_column() {
    let x = Tensor::from_vec(vec![3.0f32, 1.0, 2.0, 0.0, 5.0, 4.0], &[3, 2]).unwrap();
    let (v, i) = x.sort(0, false).unwrap();
    assert_eq!(f32s(&v), [2.0, 0.0, 3.0, 1.0, 5.0, 4.0]);
    assert_eq!(i64s(&i), [1, 1, 0, 0, 2, 2]);
}

#[test]
fn sort_of_a_transposed_view_sorts_its_logical_rows() {
    let x = Tensor::from_vec(vec![3.0f32, 1.0, 2.0, 0.0, 5.0, 4.0], &[3, 2])
        .unwrap()
        .t()
        .unwrap();
    // Logical rows: [3, 2, 5] and [1, 0, 4].
    let (v, _) = x.sort(1, false).unwrap();
    assert_eq!(f32s(&v), [2.0, 3.0, 5.0, 0.0, 1.0, 4.0]);
}

#[test]
fn sort_puts_nan_last_ascending_and_first_descending() {
    let x = Tensor::from_vec(vec![2.0f32, f32::NAN, -1.0], &[3]).unwrap();
    let (_, up) = x.sort(0, false).unwrap();
    assert_eq!(i64s(&up), [2, 0, 1]);
    let (_, down) = x.sort(0, true).unwrap();
    assert_eq!(i64s(&down), [1, 0, 2]);
}

#[test]
fn sort_keeps_the_dtype_of_large_integers_exactly() {
    let big = (1i64 << 60) + 1;
    let x = Tensor::from_vec(vec![big, big - 1, -big], &[3]).unwrap();
    let (v, _) = x.sort(0, false).unwrap();
    assert_eq!(v.dtype(), DType::I64);
    assert_eq!(i64s(&v), [-big, big - 1, big]);
}

#[test]
fn sort_of_an_empty_tensor_is_empty() {
    let x = Tensor::from_vec(Vec::<f32>::new(), &[2, 0]).unwrap();
    let (v, i) = x.sort(1, false).unwrap();
    assert_eq!((v.shape(), i.shape()), (&[2usize, 0][..], &[2usize, 0][..]));
    let (v, _) = x.sort(0, false).unwrap();
    assert_eq!(v.shape(), &[2, 0]);
}

#[test]
fn sort_of_a_scalar_is_itself_at_index_zero() {
    let x = Tensor::from_vec(vec![4.0f32], &[]).unwrap();
    let (v, i) = x.sort(-1, false).unwrap();
    assert_eq!((v.shape(), f32s(&v)), (&[][..], vec![4.0]));
    assert_eq!(i64s(&i), [0]);
}

#[test]
fn sort_with_a_dim_out_of_range_is_an_error_naming_the_op() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let err = x.sort(2, false).unwrap_err().to_string();
    assert!(
        err.starts_with("sort:") && err.contains("dimension 2"),
        "{err}"
    );
    let err = x.argsort(-3, false).unwrap_err().to_string();
    assert!(err.starts_with("argsort:"), "{err}");
}

#[test]
fn argsort_gives_the_indices_of_sort() {
    let x = Tensor::from_vec(vec![0.5f32, -2.0, 9.0, 0.0], &[4]).unwrap();
    assert_eq!(i64s(&x.argsort(0, false).unwrap()), [1, 3, 0, 2]);
    assert_eq!(i64s(&x.argsort(0, true).unwrap()), [2, 0, 3, 1]);
}

#[test]
fn sorted_values_pass_the_gradient_back_to_each_original_position() {
    let x = Tensor::from_vec(vec![3.0f32, 1.0, 2.0], &[3]).unwrap();
    x.set_requires_grad(true).unwrap();
    let (v, _) = x.sort(0, false).unwrap();
    // Weights 1, 2, 3 on the sorted positions land on 1.0 (pos 1), 2.0 (pos 2), 3.0 (pos 0).
    let w = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
    v.mul(&w).unwrap().sum().unwrap().backward().unwrap();
    assert_eq!(f32s(&x.grad().unwrap()), [3.0, 1.0, 2.0]);
}
