//! Half-precision convolutions on CUDA (cuDNN's graph API, each shape's plan chosen by timing
//! the candidates) against the CPU's F32: the forward, the input gradient and the weight
//! gradient under BF16 and F16 autocast, for the kinds of convolution YOLO has (1×1, 3×3 with
//! stride 2, depthwise, grouped, a 3-channel stem), within the half type's rounding. Skips
//! without a GPU (RB_REQUIRE_CUDA=1 makes that a failure).

use rusting_brain::backend::cuda::{cudnn, device_for_test};
use rusting_brain::{Conv2dOptions, DType, Device, Generator, Tensor};

#[path = "support/relative_error.rs"]
mod relative_error;
use relative_error::relative_error;

#[path = "support/conv_passes.rs"]
mod conv_passes;
use conv_passes::conv_passes;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, Some(&mut Generator::new(seed))).unwrap()
}

#[test]
fn half_convolutions_and_their_gradients_match_the_cpu() {
    let Some(d) = device_for_test("half_convolutions_and_their_gradients_match_the_cpu") else {
        return;
    };
    // (n, c, h, o, k, stride, padding, groups)
    let cases = [
        (2, 32, 20, 48, 1, 1, 0, 1),
        (2, 16, 24, 32, 3, 2, 1, 1),
        (2, 32, 20, 32, 3, 1, 1, 32),
        (2, 32, 12, 64, 3, 1, 1, 4),
        (2, 3, 32, 16, 3, 2, 1, 1),
    ];
    let mut failures = Vec::new();
    for (i, &(n, c, h, o, k, s, p, groups)) in cases.iter().enumerate() {
        let opts = Conv2dOptions {
            stride: (s, s),
            padding: (p, p),
            dilation: (1, 1),
            groups,
        };
        let x = randn(&[n, c, h, h], 10 + i as u64);
        let w = randn(&[o, c / groups, k, k], 20 + i as u64)
            .mul_scalar(0.2)
            .unwrap();
        let ho = (h + 2 * p - k) / s + 1;
        let r = randn(&[n, o, ho, ho], 30 + i as u64);
        let want = conv_passes(&x, &w, &r, opts, Device::Cpu, None);
        for dtype in [DType::BF16, DType::F16] {
            let got = conv_passes(&x, &w, &r, opts, d, Some(dtype));
            assert_eq!(got[0].dtype(), dtype);
            // Products of K terms in the half type's precision, accumulated in F32.
            let tol = if dtype == DType::BF16 { 2e-2 } else { 4e-3 };
            for (what, g, w) in [
                ("output", &got[0], &want[0]),
                ("input grad", &got[1], &want[1]),
                ("weight grad", &got[2], &want[2]),
            ] {
                let err = relative_error(g, w);
                if err > tol {
                    failures.push(format!(
                        "case {i} {dtype:?} {what}: relative error {err:.2e}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The half shapes ran on plans of the graph API, not the legacy calls.
    let plans = cudnn::plans();
    let half: Vec<_> = plans
        .iter()
        .filter(|p| matches!(p.dtype, DType::BF16 | DType::F16))
        .collect();
    assert!(!half.is_empty());
    let legacy: Vec<_> = half
        .iter()
        .filter(|p| !p.algorithm.starts_with("graph engine"))
        .map(|p| format!("{:?} {:?}: {}", p.pass, p.geometry, p.algorithm))
        .collect();
    assert!(
        legacy.is_empty(),
        "legacy plans for half shapes:\n{}",
        legacy.join("\n")
    );
}
