//! The one-kernel group normalization of inference on CUDA against the CPU's composite, in
//! both layouts (skips without a GPU).

use rusting_brain::backend::cuda;
use rusting_brain::{no_grad, DType, Device, Generator, Tensor};

fn values(t: &Tensor) -> Vec<f64> {
    t.to_device(Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec_f64()
        .unwrap()
}

/// x [2, 12, 5, 7] in 3 groups, far from zero (the statistics' shift is exercised), with and
/// without weight and bias and SiLU, F32 and BF16, NCHW and channels-last: the GPU's output
/// equals the CPU composite's (F32 to 1e-4; BF16 within two roundings of the output), and
/// keeps x's layout and dtype.
#[test]
fn fused_group_norm_matches_the_composite_in_both_layouts() {
    let Some(dev) = cuda::device_for_test("fused_group_norm_matches_the_composite_in_both_layouts")
    else {
        return;
    };
    let mut gen = Generator::new(0);
    let x = Tensor::randn(&[2, 12, 5, 7], DType::F32, Some(&mut gen))
        .unwrap()
        .mul_scalar(3.0)
        .unwrap()
        .add_scalar(100.0)
        .unwrap();
    let w = Tensor::randn(&[12], DType::F32, Some(&mut gen)).unwrap();
    let b = Tensor::randn(&[12], DType::F32, Some(&mut gen)).unwrap();
    for (dtype, tol) in [(DType::F32, 1e-4), (DType::BF16, 3e-2)] {
        for channels_last in [false, true] {
            for affine in [false, true] {
                for silu in [false, true] {
                    let case = format!(
                        "{dtype} channels_last {channels_last} affine {affine} silu {silu}"
                    );
                    let (wc, bc) = (affine.then_some(&w), affine.then_some(&b));
                    let reference = {
                        let x = x.to_dtype(dtype).unwrap().to_dtype(DType::F32).unwrap();
                        let y = match silu {
                            true => x.group_norm_silu(3, wc, bc, 1e-5),
                            false => x.group_norm(3, wc, bc, 1e-5),
                        };
                        values(&y.unwrap())
                    };
                    let mut xg = x.to_dtype(dtype).unwrap().to_device(dev).unwrap();
                    if channels_last {
                        xg = xg.permute(&[0, 2, 3, 1]).unwrap().contiguous().unwrap();
                        xg = xg.permute(&[0, 3, 1, 2]).unwrap();
                        assert!(xg.layout().is_channels_last());
                    }
                    let (wg, bg) = (w.to_device(dev).unwrap(), b.to_device(dev).unwrap());
                    let (wg, bg) = (affine.then_some(&wg), affine.then_some(&bg));
                    let y = no_grad(|| match silu {
                        true => xg.group_norm_silu(3, wg, bg, 1e-5),
                        false => xg.group_norm(3, wg, bg, 1e-5),
                    })
                    .unwrap();
                    assert_eq!(y.dtype(), dtype, "{case}");
                    assert_eq!(y.shape(), x.shape(), "{case}");
                    assert_eq!(
                        y.layout().is_channels_last() && !y.layout().is_contiguous(),
                        channels_last,
                        "{case}"
                    );
                    let got = values(&y);
                    let worst = got
                        .iter()
                        .zip(&reference)
                        .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
                        .fold(0.0, f64::max);
                    assert!(worst < tol, "{case}: differs by {worst:.2e}");
                }
            }
        }
    }
}
