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

/// A tensor with gaps (every other column) is refused with a message, not reduced with the
/// elements between its own.
#[test]
fn a_tensor_with_gaps_is_refused() {
    let Some(dev) = cuda::device_for_test("a_tensor_with_gaps_is_refused") else {
        return;
    };
    let t = Tensor::from_f64s(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::F32)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let err = Dist::single()
        .all_reduce_sum_(&t.narrow(1, 0, 1).unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("contiguous"), "{err}");
}

/// The gradients of a run of one go through NCCL bucket by bucket and come back unchanged: a
/// gradient in a permuted (dense) layout, one large enough for a bucket of its own, and a
/// parameter without a gradient, which a run of one passes over.
#[test]
fn a_run_of_one_reduces_its_gradients_in_buckets_and_keeps_them() {
    let Some(dev) = cuda::device_for_test("a_run_of_one_reduces_its_gradients") else {
        return;
    };
    let mut g = rusting_brain::Generator::new(5);
    let big = 7 << 20; // 28 MB of F32: more than one bucket's 25 MB
    let params: Vec<Tensor> = [vec![big], vec![64, 48], vec![10], vec![3]]
        .iter()
        .map(|shape| Tensor::zeros(shape, DType::F32, dev).unwrap())
        .collect();
    let grads: Vec<Option<Tensor>> = vec![
        Some(Tensor::randn(&[big], DType::F32, Some(&mut g)).unwrap()),
        // [64, 48] held as the transpose of a contiguous [48, 64] (made on the device below).
        Some(Tensor::randn(&[48, 64], DType::F32, Some(&mut g)).unwrap()),
        None,
        Some(Tensor::randn(&[3], DType::F32, Some(&mut g)).unwrap()),
    ];
    let before: Vec<Option<Vec<f64>>> = grads
        .iter()
        .enumerate()
        .map(|(i, g)| {
            g.as_ref().map(|g| {
                let g = if i == 1 { g.t().unwrap() } else { g.clone() };
                g.to_vec_f64().unwrap()
            })
        })
        .collect();
    for (i, (p, grad)) in params.iter().zip(&grads).enumerate() {
        let on = grad.as_ref().map(|g| g.to_device(dev).unwrap());
        p.set_grad(if i == 1 {
            on.map(|g| g.t().unwrap())
        } else {
            on
        });
    }
    assert!(!params[1].grad().unwrap().is_contiguous());
    let dist = Dist::single();
    assert!(
        !dist.reduces(),
        "a plain run does not reduce in its trainers"
    );
    dist.all_reduce_grads(&params).unwrap();
    for (i, (p, want)) in params.iter().zip(&before).enumerate() {
        let got = p.grad().map(|g| g.to_vec_f64().unwrap());
        assert_eq!(&got, want, "parameter {i}");
    }
}

/// A language model's backward with the gradients reduced during it: every bucket starts
/// before the backward returns (on the communicator's stream, while the device's stream goes
/// on), and once `finish` orders the device's stream after them the gradients are those of a
/// plain backward, bit for bit, a run of one summing nothing.
#[test]
fn a_backward_starts_every_bucket_before_it_returns_and_keeps_the_gradients() {
    use rusting_brain::dist::buckets;
    use rusting_brain::models::transformer_lm::{LmConfig, TransformerLm};
    use rusting_brain::nn::Module;
    let Some(dev) = cuda::device_for_test("a_backward_starts_every_bucket_before_it_returns")
    else {
        return;
    };
    let mut config = LmConfig::new(300, 64, 2, 8);
    config.n_kv_heads = 2;
    config.ffn_hidden = 96;
    config.max_seq_len = 64;
    let model = TransformerLm::new_on(
        config,
        &mut rusting_brain::Generator::new(7),
        DType::F32,
        dev,
    )
    .unwrap();
    let params: Vec<Tensor> = model
        .named_parameters()
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    let ids = Tensor::randint(
        0,
        300,
        &[2, 33],
        Some(&mut rusting_brain::Generator::new(8)),
    )
    .unwrap()
    .to_device(dev)
    .unwrap();
    let window = |from| ids.narrow(1, from, 32).unwrap().contiguous().unwrap();
    let (x, y) = (window(0), window(1));
    let grads = |params: &[Tensor]| -> Vec<Vec<f64>> {
        let out = params
            .iter()
            .map(|p| p.grad().unwrap().to_vec_f64().unwrap())
            .collect();
        params.iter().for_each(|p| p.set_grad(None));
        out
    };
    model.loss(&x, &y).unwrap().backward().unwrap();
    let want = grads(&params);

    let bucket_bytes = 16 << 10;
    let sizes: Vec<_> = params.iter().map(|p| (p.numel(), p.dtype())).collect();
    let planned = buckets::plan(&sizes, bucket_bytes).len();
    assert!(planned > 4, "{planned} buckets");
    let dist = Dist::single();
    let mut reducer = dist.grad_reducer(&params, bucket_bytes);
    model
        .loss(&x, &y)
        .unwrap()
        .backward_notifying(None, false, &mut |leaf| reducer.gradient_ready(leaf))
        .unwrap();
    assert_eq!(reducer.started(), planned, "started during the backward");
    reducer.finish().unwrap();
    assert!(grads(&params) == want, "the gradients changed");
}

/// ZeRO-1 in a run of one, on the device: the sharded AdamW step (fused kernels over the
/// owned parameters, which alone are all of them; a process not under `brain launch`
/// broadcasts nothing, and `repl/tests/launch.rs` runs the NCCL broadcast) leaves the
/// parameters and the state a plain step leaves, bit for bit.
#[test]
fn a_sharded_step_in_a_run_of_one_equals_the_plain_step() {
    use rusting_brain::optim::{AdamW, AdamWConfig, Optimizer};
    let Some(dev) = cuda::device_for_test("a_sharded_step_in_a_run_of_one_equals_the_plain_step")
    else {
        return;
    };
    // (parameter values, state tensors by name) after two steps.
    type Run = (Vec<Vec<f64>>, Vec<(String, Vec<f64>)>);
    let run = |shard: bool| -> Run {
        let mut g = rusting_brain::Generator::new(11);
        let params: Vec<Tensor> = [vec![64, 48], vec![48], vec![7, 3]]
            .iter()
            .map(|s| {
                Tensor::randn(s, DType::F32, Some(&mut g))
                    .unwrap()
                    .to_device(dev)
                    .unwrap()
                    .requires_grad_()
                    .unwrap()
            })
            .collect();
        let mut opt = AdamW::new(params.clone(), AdamWConfig::default()).unwrap();
        opt.set_max_grad_norm(Some(0.5)).unwrap();
        if shard {
            opt.shard_state().unwrap();
            assert!(opt.core().shard().is_some());
        }
        for step in 0..2 {
            let mut gg = rusting_brain::Generator::new(100 + step);
            for p in &params {
                let grad = Tensor::randn(p.shape(), DType::F32, Some(&mut gg)).unwrap();
                p.set_grad(Some(grad.to_device(dev).unwrap()));
            }
            opt.step().unwrap();
        }
        let values = params.iter().map(|p| p.to_vec_f64().unwrap()).collect();
        let state = opt
            .state_dict()
            .unwrap()
            .tensors
            .iter()
            .map(|(k, t)| (k.clone(), t.to_vec_f64().unwrap()))
            .collect();
        (values, state)
    };
    let (plain, sharded) = (run(false), run(true));
    assert!(plain.0 == sharded.0, "the parameters differ");
    assert!(
        !plain.1.is_empty() && plain.1 == sharded.1,
        "the state differs"
    );
}
