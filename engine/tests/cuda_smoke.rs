//! The CUDA backend end to end on a few ops: start, upload, kernels, cuBLAS, download. The
//! table-driven parity suite (cuda_parity.rs) covers every op; these name the basics.

use rusting_brain::{backend::cuda, DType, Device, Tensor};

fn close(a: &[f32], b: &[f32], tol: f32) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
}

#[test]
fn cuda_round_trip_add_matmul_softmax_sum() {
    let Some(dev) = cuda::device_for_test("cuda_round_trip_add_matmul_softmax_sum") else {
        return;
    };
    let a = Tensor::randn(&[33, 65], DType::F32, None).unwrap();
    let b = Tensor::randn(&[65, 7], DType::F32, None).unwrap();
    let (ga, gb) = (a.to_device(dev).unwrap(), b.to_device(dev).unwrap());
    assert_eq!(ga.device(), dev);
    assert_eq!(ga.to_vec_f32().unwrap(), a.to_vec_f32().unwrap());

    let cpu = a.matmul(&b).unwrap().softmax(-1).unwrap();
    let gpu = ga.matmul(&gb).unwrap().softmax(-1).unwrap();
    assert_eq!(gpu.device(), dev);
    assert!(close(
        &gpu.to_vec_f32().unwrap(),
        &cpu.to_vec_f32().unwrap(),
        1e-4
    ));

    let s_cpu = a
        .add(&a.t().unwrap().contiguous().unwrap().t().unwrap())
        .unwrap()
        .sum_dims(&[0], false)
        .unwrap();
    let s_gpu = ga
        .add(&ga.t().unwrap().contiguous().unwrap().t().unwrap())
        .unwrap()
        .sum_dims(&[0], false)
        .unwrap();
    assert!(close(
        &s_gpu.to_vec_f32().unwrap(),
        &s_cpu.to_vec_f32().unwrap(),
        1e-4
    ));

    let h = ga
        .to_dtype(DType::BF16)
        .unwrap()
        .exp()
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    let h_cpu = a
        .to_dtype(DType::BF16)
        .unwrap()
        .exp()
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    assert!(close(
        &h.to_vec_f32().unwrap(),
        &h_cpu.to_vec_f32().unwrap(),
        1e-2
    ));
}

#[test]
fn cuda_backward_through_matmul_matches_cpu() {
    let Some(dev) = cuda::device_for_test("cuda_backward_through_matmul_matches_cpu") else {
        return;
    };
    let w = Tensor::randn(&[17, 9], DType::F32, None).unwrap();
    let x = Tensor::randn(&[5, 17], DType::F32, None).unwrap();
    let grads = |device: Device| {
        let w = w
            .detach()
            .to_device(device)
            .unwrap()
            .requires_grad_()
            .unwrap();
        let x = x.to_device(device).unwrap();
        let loss = x
            .matmul(&w)
            .unwrap()
            .tanh()
            .unwrap()
            .square()
            .unwrap()
            .mean()
            .unwrap();
        loss.backward().unwrap();
        (
            loss.item().unwrap() as f32,
            w.grad().unwrap().to_vec_f32().unwrap(),
        )
    };
    let (lc, gc) = grads(Device::Cpu);
    let (lg, gg) = grads(dev);
    assert!((lc - lg).abs() < 1e-5, "{lc} vs {lg}");
    assert!(close(&gg, &gc, 1e-4));
}

#[test]
fn cuda_missing_device_is_an_error_not_a_panic() {
    // Device 7 does not exist on the test machines; without CUDA at all, same error kind.
    let t = Tensor::ones(&[2], DType::F32, Device::Cpu).unwrap();
    let err = t.to_device(Device::Cuda(7)).unwrap_err().to_string();
    assert!(err.contains("cuda:7"), "{err}");
}

/// A state dict read from a file lives on the host; loading it into a model on the GPU moves
/// each value to its parameter's device, as PyTorch's `load_state_dict` does.
#[test]
fn host_weights_load_into_a_gpu_module() {
    use rusting_brain::nn::{Linear, Module};
    let Some(dev) = cuda::device_for_test("host_weights_load_into_a_gpu_module") else {
        return;
    };
    let mut gen = rusting_brain::Generator::new(0);
    let host = Linear::new(4, 3, true, &mut gen).unwrap();
    let gpu = Linear::new(4, 3, true, &mut gen).unwrap();
    gpu.to_device(dev).unwrap();
    gpu.load_state_dict(&host.state_dict(), true).unwrap();
    let x = Tensor::randn(&[2, 4], DType::F32, None).unwrap();
    let want = host.forward(&x).unwrap().to_vec_f32().unwrap();
    let got = gpu.forward(&x.to_device(dev).unwrap()).unwrap();
    assert_eq!(got.device(), dev);
    assert!(close(&got.to_vec_f32().unwrap(), &want, 1e-5));
}
