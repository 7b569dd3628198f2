//! NCCL through the engine on one GPU (skips without a GPU): a run of one joins a
//! communicator of one through the calls every rank of a larger run makes.

use rusting_brain::backend::cuda;
use rusting_brain::dist::Dist;
use rusting_brain::{DType, Tensor};
use std::sync::Arc;

/// The all-reduce of a run of one loads NCCL, joins, queues on the device's stream and leaves
/// every value as it was, in each dtype the gradients come in, for a view that starts inside
/// its storage too.
#[test]
fn a_run_of_one_all_reduces_through_nccl() {
    let Some(dev) = cuda::device_for_test("a_run_of_one_all_reduces_through_nccl") else {
        return;
    };
    let dist = Dist::single();
    let values = [1.5, -2.0, 3.25, 0.0, 1e3, -7.5];
    for dtype in [DType::F32, DType::BF16, DType::F16, DType::F64] {
        let t = Tensor::from_f64s(&values, &[6], dtype)
            .unwrap()
            .to_device(dev)
            .unwrap();
        dist.all_reduce_sum_(&t).unwrap();
        assert_eq!(t.to_vec_f64().unwrap(), values, "{dtype:?}");
        let tail = t.narrow(0, 2, 4).unwrap();
        dist.all_reduce_sum_(&tail).unwrap();
        assert_eq!(t.to_vec_f64().unwrap(), values, "{dtype:?}, a view");
    }
    let ordinal = match dev {
        rusting_brain::Device::Cuda(n) => n,
        _ => unreachable!(),
    };
    // One communicator for the run, made on first use.
    assert!(Arc::ptr_eq(
        &dist.communicator(ordinal).unwrap(),
        &dist.communicator(ordinal).unwrap()
    ));
}

/// A strided tensor is refused with a message, not reduced in the wrong order.
#[test]
fn a_strided_tensor_is_refused() {
    let Some(dev) = cuda::device_for_test("a_strided_tensor_is_refused") else {
        return;
    };
    let t = Tensor::from_f64s(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::F32)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let err = Dist::single().all_reduce_sum_(&t.t().unwrap()).unwrap_err();
    assert!(err.to_string().contains("contiguous"), "{err}");
}
