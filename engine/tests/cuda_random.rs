//! Random draws on CUDA against the CPU generator (skips without a GPU).

use rusting_brain::backend::cuda;
use rusting_brain::{DType, Device, Generator, Tensor};

/// The same generator state gives the same values on both devices, and leaves both
/// generators at the same offset; odd starting offsets exercise draws that straddle
/// Philox blocks.
#[test]
fn cuda_draws_match_the_cpu_generator() {
    let Some(dev) = cuda::device_for_test("cuda_draws_match_the_cpu_generator") else {
        return;
    };
    for skip in [0usize, 1, 3] {
        for dtype in [DType::F32, DType::BF16, DType::F16, DType::F64] {
            let mut gc = Generator::new(42);
            gc.uniform(skip);
            let mut gg = gc;
            let n = 1000 + skip;
            let uc = Tensor::rand_on(&[n], dtype, Device::Cpu, Some(&mut gc)).unwrap();
            let ug = Tensor::rand_on(&[n], dtype, dev, Some(&mut gg)).unwrap();
            assert_eq!(ug.device(), dev);
            assert_eq!(
                uc.to_vec_f64().unwrap(),
                ug.to_vec_f64().unwrap(),
                "uniform {dtype:?} skip {skip}"
            );
            let nc = Tensor::randn_on(&[n], dtype, Device::Cpu, Some(&mut gc)).unwrap();
            let ng = Tensor::randn_on(&[n], dtype, dev, Some(&mut gg)).unwrap();
            let (a, b) = (nc.to_vec_f64().unwrap(), ng.to_vec_f64().unwrap());
            let worst = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs() / x.abs().max(1.0))
                .fold(0.0, f64::max);
            // At most one ulp of the output dtype, where the device's log or cos landed on
            // the other side of a rounding boundary (rare: usually bit for bit).
            let tol = match dtype {
                DType::F64 => 1e-14,
                DType::F32 => 2.4e-7,
                _ => 8e-3,
            };
            assert!(
                worst <= tol,
                "normal {dtype:?} skip {skip}: relative difference {worst}"
            );
            assert_eq!(gc, gg);
        }
    }
}
