//! Behaviour of the dynamic graph: accumulation, freeing, long chains, in-place safety.

use rusting_brain::{no_grad, DType, Device, Error, Tensor};

fn leaf(values: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_f64s(values, shape, DType::F64)
        .unwrap()
        .requires_grad_()
        .unwrap()
}

#[test]
fn gradients_of_a_small_expression_match_the_hand_derivation() {
    let x = leaf(&[1.0, 2.0, 3.0], &[3]);
    // d/dx sum(x^2 * 3 + x) = 6x + 1
    x.square()
        .unwrap()
        .affine(3.0, 0.0)
        .unwrap()
        .add(&x)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![7.0, 13.0, 19.0]
    );
}

#[test]
fn gradients_accumulate_across_backward_calls_until_cleared() {
    let x = leaf(&[2.0], &[1]);
    x.mul_scalar(3.0)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    x.mul_scalar(3.0)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(x.grad().unwrap().item().unwrap(), 6.0);
    x.zero_grad();
    assert!(x.grad().is_none());
}

#[test]
fn a_second_backward_through_a_freed_graph_is_an_error_and_retain_graph_allows_it() {
    let x = leaf(&[1.0, 2.0], &[2]);
    let y = x.exp().unwrap().sum().unwrap();
    y.backward_with(None, true).unwrap();
    y.backward().unwrap();
    assert!(matches!(y.backward(), Err(Error::GraphFreed { op: "sum" })));
}

#[test]
fn backward_and_drop_of_a_100k_op_chain_do_not_overflow_the_stack() {
    let x = leaf(&[1.0], &[1]);
    let mut total = x.clone();
    for _ in 0..100_000 {
        total = total.add(&x).unwrap();
    }
    total.sum().unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().item().unwrap(), 100_001.0);
    // A second chain that is dropped without a backward: its graph is still whole.
    let mut other = x.clone();
    for _ in 0..100_000 {
        other = other.mul_scalar(1.0).unwrap();
    }
    drop(other);
}

#[test]
fn writing_into_a_saved_tensor_makes_backward_fail_instead_of_giving_a_wrong_gradient() {
    let w = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let x = leaf(&[1.0, 1.0], &[1, 2]);
    let loss = x.matmul(&w).unwrap().sum().unwrap();
    no_grad(|| w.add_scalar_(1.0)).unwrap();
    let err = loss.backward().unwrap_err();
    assert!(
        matches!(err, Error::SavedTensorModified { op: "matmul", .. }),
        "{err}"
    );
}

#[test]
fn in_place_writes_into_a_leaf_that_requires_grad_need_no_grad() {
    let w = leaf(&[1.0], &[1]);
    assert!(matches!(
        w.add_scalar_(1.0),
        Err(Error::InPlaceOnLeaf { .. })
    ));
    no_grad(|| w.add_scalar_(1.0)).unwrap();
    assert_eq!(w.item().unwrap(), 2.0);
}

#[test]
fn in_place_add_of_a_tensor_to_itself_and_to_an_overlapping_view_completes() {
    let a = Tensor::from_f64s(&[1.0, 2.0, 3.0, 4.0], &[4], DType::F32).unwrap();
    a.add_(&a).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0, 8.0]);
    a.narrow(0, 1, 3)
        .unwrap()
        .copy_(&a.narrow(0, 0, 3).unwrap())
        .unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![2.0, 2.0, 4.0, 6.0]);
}

#[test]
fn copy_from_a_packed_view_at_the_start_of_a_larger_storage_takes_only_the_view() {
    // The source is read as it is (no materialized copy) and holds more than the view.
    let big = Tensor::from_f64s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[6], DType::F32).unwrap();
    let dst = Tensor::zeros(&[4], DType::F32, Device::Cpu).unwrap();
    dst.copy_(&big.narrow(0, 0, 4).unwrap()).unwrap();
    assert_eq!(dst.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    // Into a strided view as well.
    let grid = Tensor::zeros(&[2, 2], DType::F32, Device::Cpu).unwrap();
    grid.t()
        .unwrap()
        .copy_(&big.narrow(0, 0, 4).unwrap().reshape(&[2, 2]).unwrap())
        .unwrap();
    assert_eq!(grid.to_vec::<f32>().unwrap(), vec![1.0, 3.0, 2.0, 4.0]);
}

#[test]
fn no_grad_records_nothing_and_detach_cuts_the_graph() {
    let x = leaf(&[1.0], &[1]);
    let y = no_grad(|| x.exp()).unwrap();
    assert!(!y.requires_grad());
    let z = x.exp().unwrap().detach();
    assert!(!z.requires_grad() && z.is_leaf());
}

#[test]
fn backward_of_a_non_scalar_needs_an_explicit_gradient() {
    let x = leaf(&[1.0, 2.0], &[2]);
    let y = x.mul_scalar(2.0).unwrap();
    assert!(y.backward().is_err());
    y.backward_with(
        Some(Tensor::from_f64s(&[1.0, 10.0], &[2], DType::F64).unwrap()),
        false,
    )
    .unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![2.0, 20.0]);
}

#[test]
fn gradients_flow_through_mixed_precision_casts_in_the_inputs_dtype() {
    let x = Tensor::from_f64s(&[1.0, 2.0], &[2], DType::F32)
        .unwrap()
        .requires_grad_()
        .unwrap();
    let y = x
        .to_dtype(DType::BF16)
        .unwrap()
        .mul_scalar(2.0)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .sum()
        .unwrap();
    y.backward().unwrap();
    let g = x.grad().unwrap();
    assert_eq!(g.dtype(), DType::F32);
    assert_eq!(g.to_vec::<f32>().unwrap(), vec![2.0, 2.0]);
}

#[test]
fn split_pieces_are_one_node_whose_gradient_joins_theirs_with_zeros_for_unused_pieces() {
    let x = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[1, 6]);
    let pieces = x.split_with_sizes(&[1, 3, 2], -1).unwrap();
    assert_eq!(pieces.len(), 3);
    assert_eq!(pieces[1].shape(), [1, 3]);
    assert_eq!(pieces[1].to_vec::<f64>().unwrap(), [2.0, 3.0, 4.0]);
    // One node shared by the pieces; the middle piece unused by the loss.
    let (a, c) = (&pieces[0], &pieces[2]);
    assert!(std::sync::Arc::ptr_eq(
        a.grad_fn().unwrap(),
        c.grad_fn().unwrap()
    ));
    let loss = a.mul_scalar(10.0).unwrap().sum().unwrap();
    let loss = loss.add(&c.mul(c).unwrap().sum().unwrap()).unwrap();
    // Use one piece twice: its two contributions add in its own slot.
    let loss = loss.add(&c.sum().unwrap()).unwrap();
    loss.backward().unwrap();
    let g: Vec<f64> = x.grad().unwrap().to_vec().unwrap();
    assert_eq!(g, [10.0, 0.0, 0.0, 0.0, 2.0 * 5.0 + 1.0, 2.0 * 6.0 + 1.0]);
}

#[test]
fn split_sizes_that_do_not_add_up_are_an_error() {
    let x = leaf(&[1.0, 2.0, 3.0], &[3]);
    let err = x.split_with_sizes(&[1, 1], 0).unwrap_err().to_string();
    assert!(err.contains("do not add up to 3"), "{err}");
}
