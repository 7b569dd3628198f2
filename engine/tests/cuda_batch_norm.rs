//! batch_norm on CUDA at the sizes YOLO training runs (many chunks per channel): BF16 output and
//! gradients follow the CPU's, the running statistics too, and two runs agree bit for bit.

use rusting_brain::backend::cuda;
use rusting_brain::{DType, Device, Generator, Tensor};

/// One training step of batch_norm on `device`: (y, dx, dweight, dbias, running mean, running
/// var), from the same seeded BF16 input and gradient.
fn step(shape: &[usize], device: Device) -> Vec<Tensor> {
    let c = shape[1];
    let mut gen = Generator::new(11);
    let x = Tensor::randn(shape, DType::F32, Some(&mut gen))
        .unwrap()
        .affine(2.0, 3.0)
        .unwrap();
    let g = Tensor::randn(shape, DType::F32, Some(&mut gen)).unwrap();
    let leaf = |t: Tensor| t.to_device(device).unwrap().requires_grad_().unwrap();
    let x = leaf(x.to_dtype(DType::BF16).unwrap());
    let w = leaf(Tensor::rand(&[c], DType::F32, Some(&mut gen)).unwrap());
    let b = leaf(Tensor::randn(&[c], DType::F32, Some(&mut gen)).unwrap());
    let rm = Tensor::zeros(&[c], DType::F32, device).unwrap();
    let rv = Tensor::ones(&[c], DType::F32, device).unwrap();
    let y = x
        .batch_norm(Some((&rm, &rv)), Some(&w), Some(&b), true, 0.03, 1e-3)
        .unwrap();
    let g = g.to_dtype(DType::BF16).unwrap().to_device(device).unwrap();
    y.mul(&g).unwrap().sum().unwrap().backward().unwrap();
    [
        y.detach(),
        x.grad().unwrap(),
        w.grad().unwrap(),
        b.grad().unwrap(),
        rm,
        rv,
    ]
    .into_iter()
    .map(|t| {
        t.to_dtype(DType::F32)
            .unwrap()
            .to_device(Device::Cpu)
            .unwrap()
    })
    .collect()
}

#[test]
fn cuda_batch_norm_training_follows_the_cpu_and_repeats_bit_for_bit() {
    let Some(dev) = cuda::device_for_test("cuda_batch_norm_training_follows_the_cpu") else {
        return;
    };
    let names = ["y", "dx", "dweight", "dbias", "running_mean", "running_var"];
    // A 16-byte-word layer of YOLO11n's first stage (at half its batch), and planes of odd size.
    for shape in [[16usize, 16, 160, 160], [3, 5, 7, 9]] {
        let (gpu, again, cpu) = (
            step(&shape, dev),
            step(&shape, dev),
            step(&shape, Device::Cpu),
        );
        for i in 0..names.len() {
            let (a, b, r) = (
                gpu[i].to_vec_f32().unwrap(),
                again[i].to_vec_f32().unwrap(),
                cpu[i].to_vec_f32().unwrap(),
            );
            assert!(a == b, "{shape:?} {}: two CUDA runs differ", names[i]);
            // BF16 values (y, dx) may round differently by one unit; the F32 sums over up to
            // 409,600 values per channel differ in their summation order.
            let scale = r.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
            let tol = if i < 2 { 1.6e-2 } else { 2e-4 };
            let worst = a
                .iter()
                .zip(&r)
                .map(|(x, y)| (x - y).abs() / (scale * tol + y.abs() * tol))
                .fold(0f32, f32::max);
            assert!(
                worst <= 1.0,
                "{shape:?} {}: CUDA strays from the CPU by {worst} of the allowance",
                names[i]
            );
        }
    }
}
