//! Depthwise 3×3 convolutions on CUDA run on our own kernels (backend/src/cuda/depthwise.rs),
//! not cuDNN, and agree with the CPU: forward, input gradient and weight gradient in F64 and
//! F32 over strides, paddings, dilations, odd sizes and channel counts that leave a partial
//! tile of 32; and the NHWC kernels give the NCHW kernels' numbers in their own layout. Skips
//! without a GPU (RB_REQUIRE_CUDA=1 makes that a failure).

use rusting_brain::backend::cuda::{conv, cudnn, device_for_test, CudaStorage};
use rusting_brain::backend::spec::Conv2dGeometry;
use rusting_brain::backend::Storage;
use rusting_brain::{Conv2dOptions, DType, Device, Generator, Tensor};

#[path = "support/relative_error.rs"]
mod relative_error;
use relative_error::relative_error;

#[path = "support/conv_passes.rs"]
mod conv_passes;
use conv_passes::conv_passes;

fn randn(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
    Tensor::randn(shape, DType::F32, Some(&mut Generator::new(seed)))
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// (n, c, h, w, stride, padding, dilation). Stride 1 without dilation (cases 0, 1, 2 and 4)
/// takes the strip kernels, with rows that end mid-strip and every padding they allow; the
/// others take the per-element kernels.
const CASES: [(usize, usize, usize, usize, usize, usize, usize); 7] = [
    (2, 8, 10, 10, 1, 1, 1),
    (2, 24, 5, 19, 1, 2, 1),
    (1, 40, 17, 21, 1, 1, 1),
    (3, 40, 9, 13, 2, 1, 1),
    (1, 5, 7, 6, 1, 0, 1),
    (2, 33, 12, 11, 1, 2, 2),
    (2, 16, 15, 15, 3, 2, 1),
];

fn options(s: usize, p: usize, d: usize, groups: usize) -> Conv2dOptions {
    Conv2dOptions {
        stride: (s, s),
        padding: (p, p),
        dilation: (d, d),
        groups,
    }
}

#[test]
fn depthwise_passes_run_on_our_kernels_and_match_the_cpu() {
    let Some(d) = device_for_test("depthwise_passes_run_on_our_kernels_and_match_the_cpu") else {
        return;
    };
    let mut failures = Vec::new();
    for (i, &(n, c, h, w, s, p, dil)) in CASES.iter().enumerate() {
        let o = options(s, p, dil, c);
        let ho = (h + 2 * p - dil * 2 - 1) / s + 1;
        let wo = (w + 2 * p - dil * 2 - 1) / s + 1;
        for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5)] {
            let seed = 100 * i as u64;
            let x = randn(&[n, c, h, w], seed, dtype);
            let k = randn(&[c, 1, 3, 3], seed + 1, dtype);
            let r = randn(&[n, c, ho, wo], seed + 2, dtype);
            let want = conv_passes(&x, &k, &r, o, Device::Cpu, None);
            let got = conv_passes(&x, &k, &r, o, d, None);
            for (what, g, w) in ["output", "input grad", "weight grad"]
                .iter()
                .zip(&got)
                .zip(&want)
                .map(|((a, b), c)| (a, b, c))
            {
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
    // Every case ran its three passes in both dtypes on the depthwise kernels, none on cuDNN.
    let ran = conv::plans();
    for &(n, c, h, w, ..) in &CASES {
        for dtype in [DType::F64, DType::F32] {
            let passes = ran
                .iter()
                .filter(|p| {
                    let g = &p.geometry;
                    (g.n, g.c, g.h, g.w) == (n, c, h, w)
                        && p.dtype == dtype
                        && p.format == cudnn::Format::Nchw
                        && p.algorithm == "depthwise kernel"
                })
                .count();
            assert_eq!(
                passes, 3,
                "{dtype:?} depthwise {n}x{c}x{h}x{w}: {passes} of 3 passes"
            );
        }
    }
    assert!(cudnn::plans().iter().all(|p| p.geometry.groups == 1));
}

fn on_cuda(s: &Storage) -> &CudaStorage {
    match s {
        Storage::Cuda(c) => c,
        Storage::Cpu(_) => unreachable!("made on CUDA"),
    }
}

/// A [n, a, b, c] result of an NHWC pass as an NCHW tensor.
fn from_nhwc(s: CudaStorage, shape: [usize; 4]) -> Tensor {
    let [n, c, h, w] = shape;
    Tensor::from_storage(Storage::Cuda(s), &[n, h, w, c])
        .unwrap()
        .permute(&[0, 3, 1, 2])
        .unwrap()
}

#[test]
fn nhwc_depthwise_passes_equal_the_nchw_ones() {
    let Some(d) = device_for_test("nhwc_depthwise_passes_equal_the_nchw_ones") else {
        return;
    };
    use cudnn::{Format, Pass};
    for (i, &(n, c, h, w, s, p, dil)) in CASES.iter().enumerate() {
        let ho = (h + 2 * p - dil * 2 - 1) / s + 1;
        let wo = (w + 2 * p - dil * 2 - 1) / s + 1;
        let g = Conv2dGeometry {
            n,
            c,
            h,
            w,
            o: c,
            kh: 3,
            kw: 3,
            stride: (s, s),
            padding: (p, p),
            dilation: (dil, dil),
            groups: c,
            ho,
            wo,
        };
        let seed = 7 * i as u64;
        let on = |t: Tensor| t.to_device(d).unwrap();
        let x = on(randn(&[n, c, h, w], seed, DType::F32));
        let k = on(randn(&[c, 1, 3, 3], seed + 1, DType::F32));
        let dy = on(randn(&[n, c, ho, wo], seed + 2, DType::F32));
        let nhwc = |t: &Tensor| t.permute(&[0, 2, 3, 1]).unwrap().contiguous().unwrap();
        let (x_nhwc, dy_nhwc) = (nhwc(&x), nhwc(&dy));
        let guards = [
            x.storage(),
            k.storage(),
            dy.storage(),
            x_nhwc.storage(),
            dy_nhwc.storage(),
        ];
        let [xc, kc, dyc, xl, dyl] = guards.each_ref().map(|g| on_cuda(g));
        let run = |pass, f, a: &CudaStorage, b: &CudaStorage| {
            conv::run_pass(pass, f, (a, 0), (b, 0), &g).unwrap()
        };
        let pairs = [
            (
                Tensor::from_storage(
                    Storage::Cuda(run(Pass::Forward, Format::Nchw, xc, kc)),
                    &[n, c, ho, wo],
                )
                .unwrap(),
                from_nhwc(run(Pass::Forward, Format::Nhwc, xl, kc), [n, c, ho, wo]),
            ),
            (
                Tensor::from_storage(
                    Storage::Cuda(run(Pass::InputGrad, Format::Nchw, dyc, kc)),
                    &[n, c, h, w],
                )
                .unwrap(),
                from_nhwc(run(Pass::InputGrad, Format::Nhwc, dyl, kc), [n, c, h, w]),
            ),
            (
                Tensor::from_storage(
                    Storage::Cuda(run(Pass::WeightGrad, Format::Nchw, xc, dyc)),
                    &[c, 9],
                )
                .unwrap(),
                Tensor::from_storage(
                    Storage::Cuda(run(Pass::WeightGrad, Format::Nhwc, xl, dyl)),
                    &[c, 9],
                )
                .unwrap(),
            ),
        ];
        for (what, (a, b)) in ["forward", "input grad", "weight grad"].iter().zip(&pairs) {
            let err = relative_error(b, a);
            assert!(
                err < 1e-5,
                "case {i} {what}: NHWC differs from NCHW by {err:.2e}"
            );
        }
    }
}
