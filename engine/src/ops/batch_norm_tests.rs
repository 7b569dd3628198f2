use crate::{DType, Device, Generator, Tensor};

fn randn(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
    Tensor::randn(shape, dtype, Some(&mut Generator::new(seed))).unwrap()
}

fn close(a: &Tensor, b: &Tensor, tol: f64) {
    let (a, b) = (a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{i}: {x} vs {y}");
    }
}

/// The composition the fused op replaces, in F64: statistics over every dim but 1.
fn reference(x: &Tensor, w: &Tensor, b: &Tensor, eps: f64) -> Tensor {
    let dims: Vec<isize> = (0..x.rank() as isize).filter(|&d| d != 1).collect();
    let mut per_channel = vec![1; x.rank()];
    per_channel[1] = x.shape()[1];
    let mean = x.mean_dims(&dims, true).unwrap();
    let var = x.var_dims(&dims, false, true).unwrap();
    x.sub(&mean)
        .unwrap()
        .mul(&var.add_scalar(eps).unwrap().rsqrt().unwrap())
        .unwrap()
        .mul(&w.reshape_to(&per_channel).unwrap())
        .unwrap()
        .add(&b.reshape_to(&per_channel).unwrap())
        .unwrap()
}

#[test]
fn training_output_and_gradients_equal_the_composition() {
    // A mean far from zero (shift 50) checks the statistics do not cancel.
    let x = randn(&[3, 4, 5, 6], 1, DType::F64)
        .add_scalar(50.0)
        .unwrap();
    let w = randn(&[4], 2, DType::F64);
    let b = randn(&[4], 3, DType::F64);
    let g = randn(&[3, 4, 5, 6], 4, DType::F64);
    let grads = |fused: bool| {
        let leaves: Vec<Tensor> = [&x, &w, &b]
            .iter()
            .map(|t| t.detach().requires_grad_().unwrap())
            .collect();
        let y = if fused {
            leaves[0]
                .batch_norm(None, Some(&leaves[1]), Some(&leaves[2]), true, 0.1, 1e-3)
                .unwrap()
        } else {
            reference(&leaves[0], &leaves[1], &leaves[2], 1e-3)
        };
        y.mul(&g).unwrap().sum().unwrap().backward().unwrap();
        let mut out = vec![y.detach()];
        out.extend(leaves.iter().map(|l| l.grad().unwrap()));
        out
    };
    for (fused, composed) in grads(true).iter().zip(&grads(false)) {
        close(fused, composed, 1e-10);
    }
}

#[test]
fn training_updates_the_running_statistics_with_the_unbiased_variance() {
    // Channel 0 holds 1, 2, 3, 6 (mean 3, unbiased var 14/3); channel 1 holds 0, 0, 4, 4
    // (mean 2, unbiased var 16/3).
    let x = Tensor::from_vec(vec![1f32, 2., 0., 0., 3., 6., 4., 4.], &[2, 2, 2]).unwrap();
    let rm = Tensor::from_vec(vec![1f32, -1.], &[2]).unwrap();
    let rv = Tensor::from_vec(vec![2f32, 0.5], &[2]).unwrap();
    x.batch_norm(Some((&rm, &rv)), None, None, true, 0.25, 1e-5)
        .unwrap();
    // 0.75 * 1 + 0.25 * 3 and 0.75 * -1 + 0.25 * 2.
    let want_m = [1.5, -0.25];
    let want_v = [
        0.75 * 2.0 + 0.25 * 14.0 / 3.0,
        0.75 * 0.5 + 0.25 * 16.0 / 3.0,
    ];
    close(&rm, &Tensor::from_vec(want_m.to_vec(), &[2]).unwrap(), 1e-6);
    close(&rv, &Tensor::from_vec(want_v.to_vec(), &[2]).unwrap(), 1e-6);
}

#[test]
fn running_statistics_of_another_dtype_are_updated_too() {
    // F64 statistics beside an F32 input take the tensor-op path; the values are the same.
    let x = randn(&[4, 3, 2], 5, DType::F32);
    let fast = (
        Tensor::zeros(&[3], DType::F32, Device::Cpu).unwrap(),
        Tensor::ones(&[3], DType::F32, Device::Cpu).unwrap(),
    );
    let slow = (
        Tensor::zeros(&[3], DType::F64, Device::Cpu).unwrap(),
        Tensor::ones(&[3], DType::F64, Device::Cpu).unwrap(),
    );
    for (rm, rv) in [&fast, &slow] {
        x.batch_norm(Some((rm, rv)), None, None, true, 0.1, 1e-5)
            .unwrap();
    }
    close(&fast.0, &slow.0, 1e-6);
    close(&fast.1, &slow.1, 1e-6);
}

#[test]
fn eval_normalizes_with_the_running_statistics_and_leaves_them_alone() {
    let x = randn(&[2, 3, 4], 6, DType::F32);
    let rm = Tensor::from_vec(vec![0.5f32, -1.0, 2.0], &[3]).unwrap();
    let rv = Tensor::from_vec(vec![4.0f32, 0.25, 1.0], &[3]).unwrap();
    let y = x
        .batch_norm(Some((&rm, &rv)), None, None, false, 0.1, 0.0)
        .unwrap();
    let want = x
        .sub(&rm.reshape(&[1, 3, 1]).unwrap())
        .unwrap()
        .div(&rv.sqrt().unwrap().reshape(&[1, 3, 1]).unwrap())
        .unwrap();
    close(&y, &want, 1e-6);
    assert_eq!(rm.to_vec_f32().unwrap(), [0.5, -1.0, 2.0]);
    assert_eq!(rv.to_vec_f32().unwrap(), [4.0, 0.25, 1.0]);
}

#[test]
fn a_bf16_input_gives_a_bf16_output_and_f32_parameter_gradients() {
    let x = randn(&[4, 2, 3, 3], 7, DType::BF16)
        .requires_grad_()
        .unwrap();
    let w = Tensor::ones(&[2], DType::F32, Device::Cpu)
        .unwrap()
        .requires_grad_()
        .unwrap();
    let y = x.batch_norm(None, Some(&w), None, true, 0.1, 1e-5).unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    y.sum().unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().dtype(), DType::BF16);
    assert_eq!(w.grad().unwrap().dtype(), DType::F32);
}

#[test]
fn bad_input_is_an_error_naming_what_was_wrong() {
    let x = randn(&[2, 3, 4], 8, DType::F32);
    let err = |r: crate::Result<Tensor>| r.err().unwrap().to_string();
    let w = Tensor::ones(&[4], DType::F32, Device::Cpu).unwrap();
    assert!(err(x.batch_norm(None, Some(&w), None, true, 0.1, 1e-5))
        .contains("weight must have shape [3] for input [2, 3, 4], got [4]"));
    assert!(err(x.batch_norm(None, None, None, false, 0.1, 1e-5))
        .contains("eval mode normalizes with the running statistics, and none were given"));
    let one = randn(&[1, 3], 9, DType::F32);
    assert!(err(one.batch_norm(None, None, None, true, 0.1, 1e-5))
        .contains("training needs more than one value per channel, got input [1, 3]"));
    assert!(
        err(randn(&[3], 10, DType::F32).batch_norm(None, None, None, true, 0.1, 1e-5))
            .contains("channels at dim 1")
    );
}

#[test]
fn fused_activations_equal_batch_norm_then_the_activation_with_gradients() {
    let x = randn(&[2, 3, 4, 5], 11, DType::F64);
    let w = randn(&[3], 12, DType::F64);
    let b = randn(&[3], 13, DType::F64);
    let g = randn(&[2, 3, 4, 5], 14, DType::F64);
    let (rm, rv) = (
        randn(&[3], 15, DType::F64),
        randn(&[3], 16, DType::F64)
            .abs()
            .unwrap()
            .add_scalar(0.5)
            .unwrap(),
    );
    use crate::backend::spec::{NormAct, UnaryOp};
    for (act, op) in [
        (NormAct::Silu, UnaryOp::Silu),
        (NormAct::Relu, UnaryOp::Relu),
    ] {
        for training in [true, false] {
            let run = |fused: bool| {
                let leaves: Vec<Tensor> = [&x, &w, &b]
                    .iter()
                    .map(|t| t.detach().requires_grad_().unwrap())
                    .collect();
                let (m, v) = (rm.contiguous_copy().unwrap(), rv.contiguous_copy().unwrap());
                let (lx, lw, lb) = (&leaves[0], Some(&leaves[1]), Some(&leaves[2]));
                let y = if fused {
                    lx.batch_norm_act(Some((&m, &v)), lw, lb, training, 0.1, 1e-3, act)
                } else {
                    lx.batch_norm(Some((&m, &v)), lw, lb, training, 0.1, 1e-3)
                        .and_then(|y| y.unary(op))
                }
                .unwrap();
                y.mul(&g).unwrap().sum().unwrap().backward().unwrap();
                let mut out = vec![y.detach(), m, v];
                out.extend(leaves.iter().map(|l| l.grad().unwrap()));
                out
            };
            for (fused, composed) in run(true).iter().zip(&run(false)) {
                close(fused, composed, 1e-12);
            }
        }
    }
}
