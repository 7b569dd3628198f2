//! The fused training products' pieces on CUDA: SwiGLU reading the two halves of one gate/up
//! product in place equals SwiGLU of contiguous copies bit for bit, forward and backward.

use rusting_brain::{backend::cuda, DType, Tensor};

fn bits(t: &Tensor) -> Vec<u32> {
    let v = t.to_dtype(DType::F32).unwrap().to_vec_f32().unwrap();
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn swiglu_of_the_halves_of_one_product_equals_swiglu_of_copies() {
    let Some(dev) = cuda::device_for_test("swiglu_of_the_halves_of_one_product") else {
        return;
    };
    // 64 columns: 16-byte groups; 61: one element at a time.
    for (rows, f) in [(2 * 37, 64), (5, 61)] {
        for dtype in [DType::BF16, DType::F32] {
            let gu = Tensor::randn(&[rows, 2 * f], DType::F32, None).unwrap();
            let gu = gu.to_device(dev).unwrap().to_dtype(dtype).unwrap();
            let probe = Tensor::randn(&[rows, f], DType::F32, None).unwrap();
            let probe = probe.to_device(dev).unwrap().to_dtype(dtype).unwrap();

            let packed = gu.detach().requires_grad_().unwrap();
            let halves = packed.split_with_sizes(&[f, f], -1).unwrap();
            let y = halves[0].swiglu(&halves[1]).unwrap();
            y.mul(&probe).unwrap().sum().unwrap().backward().unwrap();

            let gate = gu.narrow(1, 0, f).unwrap().contiguous().unwrap();
            let up = gu.narrow(1, f, f).unwrap().contiguous().unwrap();
            let (gate, up) = (gate.requires_grad_().unwrap(), up.requires_grad_().unwrap());
            let want = gate.swiglu(&up).unwrap();
            want.mul(&probe).unwrap().sum().unwrap().backward().unwrap();

            assert_eq!(bits(&y), bits(&want), "values, [{rows}, {f}] {dtype:?}");
            let joined = Tensor::cat(&[gate.grad().unwrap(), up.grad().unwrap()], 1).unwrap();
            let got = packed.grad().unwrap();
            assert_eq!(
                bits(&got),
                bits(&joined),
                "gradient, [{rows}, {f}] {dtype:?}"
            );
        }
    }
}
