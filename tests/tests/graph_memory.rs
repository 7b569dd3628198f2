//! What a recorded graph keeps alive until backward: the tensors the ops saved, and nothing
//! else. An op's output that no backward reads is freed when the caller drops it, and a
//! product with a frozen factor keeps only that factor (a LoRA branch's [rows, out] products
//! are not held per layer).

use rb_integration_tests::alloc_meter::{held_after, Meter};
use rusting_brain::{DType, Device, Tensor};

#[global_allocator]
static A: Meter = Meter;

const N: usize = 1 << 20;

/// Bytes the graph of sum((w + 1) * c) holds between forward and backward.
fn graph_bytes(c_trains: bool) -> usize {
    let w = Tensor::zeros(&[N], DType::F32, Device::Cpu).unwrap();
    w.set_requires_grad(true).unwrap();
    let c = Tensor::full(3.0, &[], DType::F32, Device::Cpu).unwrap();
    c.set_requires_grad(c_trains).unwrap();
    let (loss, held) = held_after(|| w.add_scalar(1.0).unwrap().mul(&c).unwrap().sum().unwrap());
    loss.backward().unwrap();
    assert_eq!(w.grad().unwrap().to_vec::<f32>().unwrap()[0], 3.0);
    held
}

#[test]
fn intermediates_no_backward_reads_are_freed_before_backward() {
    // w + 1 and the product are 4 MiB each. With c frozen, neither is read by a backward.
    let held = graph_bytes(false);
    assert!(held < N, "the graph kept {held} bytes");
}

#[test]
fn a_trainable_factor_keeps_the_other_operand_for_its_gradient() {
    let held = graph_bytes(true);
    assert!(
        (N * 4..N * 5).contains(&held),
        "the graph kept {held} bytes, not the 4 MiB of w + 1"
    );
}
