//! CUDA inference in a half type, with `RB_CHANNELS_LAST=1`, runs convolutions channels-last
//! (NHWC images, [O, kh, kw, C] weights) and keeps the layout through the ops that follow: the
//! fused bias + activation, elementwise ops on the flat run of a dense tensor, and `cat`. Each
//! result here is checked against the CPU's F32 composition of the same ops, within F16's
//! rounding. Skips without a GPU (RB_REQUIRE_CUDA=1 makes that a failure).

use rusting_brain::backend::cuda::device_for_test;
use rusting_brain::backend::spec::UnaryOp;
use rusting_brain::{no_grad, Conv2dOptions, DType, Device, Generator, Tensor};

#[path = "support/relative_error.rs"]
mod relative_error;
use relative_error::relative_error;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, Some(&mut Generator::new(seed))).unwrap()
}

/// The CUDA device with channels-last opted into (read once per process, before any conv).
fn channels_last_device(test: &str) -> Option<Device> {
    std::env::set_var("RB_CHANNELS_LAST", "1");
    device_for_test(test)
}

fn half_on(t: &Tensor, d: Device) -> Tensor {
    t.to(d, DType::F16).unwrap()
}

fn opts(stride: usize, padding: usize, groups: usize) -> Conv2dOptions {
    Conv2dOptions {
        stride: (stride, stride),
        padding: (padding, padding),
        dilation: (1, 1),
        groups,
    }
}

#[test]
fn half_convolutions_run_channels_last_and_match_the_cpu() {
    let Some(d) = channels_last_device("half_convolutions_run_channels_last_and_match_the_cpu")
    else {
        return;
    };
    // (c, o, k, stride, groups): YOLO's kinds of convolution.
    for (i, &(c, o, k, s, g)) in [
        (16, 32, 3, 2, 1),
        (32, 32, 1, 1, 1),
        (24, 24, 3, 1, 24),
        (8, 16, 3, 1, 1),
    ]
    .iter()
    .enumerate()
    {
        let seed = 10 * i as u64;
        let x = randn(&[2, c, 20, 20], seed);
        let w = randn(&[o, c / g, k, k], seed + 1).mul_scalar(0.2).unwrap();
        let b = randn(&[o], seed + 2);
        let o = opts(s, k / 2, g);
        let want = x.conv2d(&w, Some(&b), o).unwrap().silu().unwrap();
        let got = no_grad(|| {
            half_on(&x, d).conv2d_act(
                &half_on(&w, d),
                Some(&half_on(&b, d)),
                o,
                Some(UnaryOp::Silu),
            )
        })
        .unwrap();
        assert!(
            got.layout().is_channels_last(),
            "case {i}: {:?}",
            got.layout()
        );
        let err = relative_error(&got, &want);
        assert!(err < 1e-2, "case {i}: relative error {err}");
    }
}

#[test]
fn channels_last_flows_through_residuals_and_concatenation() {
    let Some(d) = channels_last_device("channels_last_flows_through_residuals_and_concatenation")
    else {
        return;
    };
    let x = randn(&[2, 8, 12, 12], 1);
    let w1 = randn(&[8, 8, 3, 3], 2).mul_scalar(0.2).unwrap();
    let w2 = randn(&[8, 8, 1, 1], 3).mul_scalar(0.3).unwrap();
    let o = opts(1, 1, 1);
    let o1 = opts(1, 0, 1);
    let block = |x: &Tensor, w1: &Tensor, w2: &Tensor| {
        let a = x.conv2d(w1, None, o)?.silu()?;
        let b = a.conv2d(w2, None, o1)?;
        let r = a.add(&b)?.sigmoid()?;
        Tensor::cat(&[a, r], 1)
    };
    let want = block(&x, &w1, &w2).unwrap();
    let got = no_grad(|| block(&half_on(&x, d), &half_on(&w1, d), &half_on(&w2, d))).unwrap();
    assert!(got.layout().is_channels_last(), "{:?}", got.layout());
    let err = relative_error(&got, &want);
    assert!(err < 1e-2, "relative error {err}");
}

#[test]
fn bias_act_matches_the_cpu_on_row_major_and_channels_last_images() {
    let Some(d) =
        channels_last_device("bias_act_matches_the_cpu_on_row_major_and_channels_last_images")
    else {
        return;
    };
    // 7x7 planes do not fill 16-byte groups; 8x8 do; 3 channels leave channels-last ungrouped.
    for (i, shape) in [[2, 3, 7, 7], [2, 16, 8, 8], [1, 3, 8, 8]]
        .iter()
        .enumerate()
    {
        let x = randn(shape, 40 + i as u64);
        let b = randn(&[shape[1]], 50 + i as u64);
        let want = x
            .add(&b.reshape(&[1, shape[1] as isize, 1, 1]).unwrap())
            .unwrap()
            .silu()
            .unwrap();
        for channels_last in [false, true] {
            let xd = half_on(&x, d);
            let xd = if channels_last {
                xd.permute(&[0, 2, 3, 1])
                    .unwrap()
                    .contiguous()
                    .unwrap()
                    .permute(&[0, 3, 1, 2])
                    .unwrap()
            } else {
                xd
            };
            let got = no_grad(|| xd.bias_act(&half_on(&b, d), Some(UnaryOp::Silu))).unwrap();
            assert_eq!(got.layout().is_channels_last(), channels_last, "case {i}");
            let err = relative_error(&got, &want);
            assert!(
                err < 1e-2,
                "case {i} channels_last {channels_last}: relative error {err}"
            );
        }
    }
}

#[test]
fn a_half_yolo_forward_on_cuda_matches_the_f32_cpu_forward() {
    let Some(d) = channels_last_device("a_half_yolo_forward_on_cuda_matches_the_f32_cpu_forward")
    else {
        return;
    };
    use rusting_brain::models::yolo::YoloModel;
    use rusting_brain::nn::Module;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/yolo/parity/tiny_best.pt");
    let model = YoloModel::load(&path).unwrap().fuse().unwrap();
    let x = Tensor::rand(&[2, 3, 160, 160], DType::F32, Some(&mut Generator::new(7))).unwrap();
    let want = no_grad(|| model.forward(&x)).unwrap();
    model.to_device(d).unwrap();
    let got = no_grad(|| {
        rusting_brain::amp::autocast(Some(DType::F16), || model.forward(&half_on(&x, d)))
    })
    .unwrap();
    let err = relative_error(&got, &want);
    println!("half YOLO forward on CUDA: relative error {err:.2e}");
    assert!(err < 2e-2, "relative error {err}");
}
