//! The fused decode products on the CPU, where they are the composition: equal bit for bit to
//! the model's own modules (RmsNorm, Linear, swiglu, add), and clear errors for bad shapes.
//! The CUDA kernels are checked against these in engine/tests/cuda_decode_gemv.rs.

use super::*;
use crate::nn::{Linear, Module, RmsNorm};
use crate::{DType, Device, Generator};

fn randn(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, Some(&mut Generator::new(seed)))
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// Same dtype, shape and values, bit for bit.
fn assert_identical(got: &Tensor, want: &Tensor) {
    assert_eq!((got.dtype(), got.shape()), (want.dtype(), want.shape()));
    let bits = |t: &Tensor| -> Vec<u64> {
        t.to_dtype(DType::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
            .into_iter()
            .map(f64::to_bits)
            .collect()
    };
    assert_eq!(bits(got), bits(want));
}

fn linear(w: &Tensor, x: &Tensor) -> Tensor {
    Linear::from_tensors(w.clone(), None)
        .unwrap()
        .forward(x)
        .unwrap()
}

#[test]
fn rms_norm_linears_is_the_norm_then_each_linear() {
    for dtype in [DType::F32, DType::BF16] {
        let x = randn(&[2, 3, 16], dtype, 1);
        let g = randn(&[16], dtype, 2);
        let (wq, wk) = (randn(&[8, 16], dtype, 3), randn(&[4, 16], dtype, 4));
        let got = x.rms_norm_linears(&g, 1e-5, &[&wq, &wk]).unwrap();
        let norm = RmsNorm::from_tensor(g.clone(), 1e-5).unwrap();
        let normed = amp::for_products(&norm.forward(&x).unwrap()).unwrap();
        assert_eq!(got.len(), 2);
        assert_identical(&got[0], &linear(&wq, &normed));
        assert_identical(&got[1], &linear(&wk, &normed));
        assert_eq!(got[1].shape(), [2, 3, 4]);
    }
}

#[test]
fn rms_norm_swiglu_is_the_norm_then_both_products_then_the_gating() {
    for dtype in [DType::F32, DType::BF16] {
        let x = randn(&[2, 3, 16], dtype, 11);
        let g = randn(&[16], dtype, 12);
        let (gate, up) = (randn(&[8, 16], dtype, 13), randn(&[8, 16], dtype, 14));
        let got = x.rms_norm_swiglu(&g, 1e-5, &gate, &up).unwrap();
        let gu = x.rms_norm_linears(&g, 1e-5, &[&gate, &up]).unwrap();
        assert_identical(&got, &gu[0].swiglu(&gu[1]).unwrap());
        assert_eq!(got.shape(), [2, 3, 8]);
    }
}

#[test]
fn gate_and_up_weights_of_different_widths_are_an_error() {
    let x = Tensor::zeros(&[2, 16], DType::F32, Device::Cpu).unwrap();
    let g = Tensor::ones(&[16], DType::F32, Device::Cpu).unwrap();
    let gate = Tensor::zeros(&[8, 16], DType::F32, Device::Cpu).unwrap();
    let up = Tensor::zeros(&[12, 16], DType::F32, Device::Cpu).unwrap();
    let e = error_of(x.rms_norm_swiglu(&g, 1e-6, &gate, &up));
    assert!(
        e.contains(NORM_SWIGLU_OP) && e.contains("[8, 16]") && e.contains("[12, 16]"),
        "{e}"
    );
}

#[test]
fn swiglu_linear_is_the_gating_then_the_linear_then_the_residual() {
    // A BF16 product added to an F32 residual stream, and one stream of one dtype.
    for (dtype, res_dtype) in [(DType::BF16, DType::F32), (DType::F32, DType::F32)] {
        let (gate, up) = (randn(&[3, 24], dtype, 5), randn(&[3, 24], dtype, 6));
        let w = randn(&[16, 24], dtype, 7);
        let h = randn(&[3, 16], res_dtype, 8);
        let product = linear(&w, &gate.swiglu(&up).unwrap());
        let got = gate.swiglu_linear(&up, &w, Some(&h)).unwrap();
        assert_identical(&got, &h.add(&product).unwrap());
        let got = gate.swiglu_linear(&up, &w, None).unwrap();
        assert_identical(&got, &product);
    }
}

#[test]
fn linear_residual_is_the_linear_plus_the_residual() {
    let x = randn(&[1, 2, 32], DType::BF16, 9);
    let w = randn(&[8, 32], DType::BF16, 10);
    let h = randn(&[1, 2, 8], DType::BF16, 11);
    let got = x.linear_residual(&w, Some(&h)).unwrap();
    assert_identical(&got, &h.add(&linear(&w, &x)).unwrap());
    // A single row without a batch dim.
    let x1 = randn(&[32], DType::F32, 12);
    let w1 = w.to_dtype(DType::F32).unwrap();
    assert_identical(&x1.linear_residual(&w1, None).unwrap(), &linear(&w1, &x1));
}

#[test]
fn gradients_flow_through_the_composition() {
    let x = randn(&[2, 8], DType::F32, 13).requires_grad_().unwrap();
    let w = randn(&[4, 8], DType::F32, 14).requires_grad_().unwrap();
    let g = randn(&[8], DType::F32, 15).requires_grad_().unwrap();
    let y = x.rms_norm_linears(&g, 1e-6, &[&w]).unwrap();
    y[0].sum().unwrap().backward().unwrap();
    for t in [&x, &w, &g] {
        assert!(t.grad().is_some(), "a gradient for every input");
    }
}

fn error_of(r: Result<impl std::fmt::Debug>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn a_weight_of_another_width_is_an_error_naming_the_op_and_shapes() {
    let x = Tensor::zeros(&[2, 16], DType::F32, Device::Cpu).unwrap();
    let w = Tensor::zeros(&[8, 12], DType::F32, Device::Cpu).unwrap();
    let e = error_of(x.linear_residual(&w, None));
    assert!(
        e.contains(LINEAR_OP) && e.contains("[8, 12]") && e.contains("[2, 16]"),
        "{e}"
    );
    let g = Tensor::ones(&[16], DType::F32, Device::Cpu).unwrap();
    let ok = Tensor::zeros(&[8, 16], DType::F32, Device::Cpu).unwrap();
    let e = error_of(x.rms_norm_linears(&g, 1e-6, &[&ok, &w]));
    assert!(
        e.contains(NORM_OP) && e.contains("weight 1") && e.contains("[8, 12]"),
        "{e}"
    );
    let e = error_of(x.swiglu_linear(&x, &w, None));
    assert!(e.contains(SWIGLU_OP) && e.contains("[8, 12]"), "{e}");
}

#[test]
fn a_norm_weight_of_the_wrong_length_is_an_error() {
    let x = Tensor::zeros(&[2, 16], DType::F32, Device::Cpu).unwrap();
    let w = Tensor::zeros(&[8, 16], DType::F32, Device::Cpu).unwrap();
    let g = Tensor::ones(&[15], DType::F32, Device::Cpu).unwrap();
    let e = error_of(x.rms_norm_linears(&g, 1e-6, &[&w]));
    assert!(
        e.contains(NORM_OP) && e.contains("[15]") && e.contains("[16]"),
        "{e}"
    );
}

#[test]
fn a_residual_of_another_shape_is_an_error() {
    let x = Tensor::zeros(&[2, 16], DType::F32, Device::Cpu).unwrap();
    let w = Tensor::zeros(&[8, 16], DType::F32, Device::Cpu).unwrap();
    // [1, 8] would broadcast in an add; the fused op takes the output's shape only.
    let r = Tensor::zeros(&[1, 8], DType::F32, Device::Cpu).unwrap();
    let e = error_of(x.linear_residual(&w, Some(&r)));
    assert!(
        e.contains(LINEAR_OP) && e.contains("[1, 8]") && e.contains("[2, 8]"),
        "{e}"
    );
    let e = error_of(x.swiglu_linear(&x, &w, Some(&r)));
    assert!(e.contains(SWIGLU_OP) && e.contains("[1, 8]"), "{e}");
}

#[test]
fn no_weights_or_mismatched_gate_and_up_are_errors() {
    let x = Tensor::zeros(&[2, 16], DType::F32, Device::Cpu).unwrap();
    let g = Tensor::ones(&[16], DType::F32, Device::Cpu).unwrap();
    let e = error_of(x.rms_norm_linears(&g, 1e-6, &[] as &[&Tensor]));
    assert!(
        e.contains(NORM_OP) && e.contains("at least one weight"),
        "{e}"
    );
    let w = Tensor::zeros(&[8, 16], DType::F32, Device::Cpu).unwrap();
    let up = Tensor::zeros(&[2, 16], DType::BF16, Device::Cpu).unwrap();
    let e = error_of(x.swiglu_linear(&up, &w, None));
    assert!(
        e.contains(SWIGLU_OP) && e.contains("one shape and dtype"),
        "{e}"
    );
}

#[test]
fn products_take_autocasts_dtype_on_cuda_only() {
    let cuda = Device::Cuda(0);
    let dtypes = amp::autocast(Some(DType::BF16), || {
        Ok((
            product_dtype(cuda, DType::F32, DType::F32),
            product_dtype(cuda, DType::BF16, DType::F32),
            product_dtype(Device::Cpu, DType::F32, DType::F32),
        ))
    })
    .unwrap();
    assert_eq!(dtypes, (DType::BF16, DType::BF16, DType::F32));
    assert_eq!(product_dtype(cuda, DType::BF16, DType::F32), DType::F32);
    assert_eq!(product_dtype(cuda, DType::BF16, DType::BF16), DType::BF16);
}

#[test]
fn the_cpu_runs_the_composition() {
    let x = Tensor::zeros(&[1, 16], DType::BF16, Device::Cpu).unwrap();
    let w = Tensor::zeros(&[8, 16], DType::BF16, Device::Cpu).unwrap();
    assert!(!runs_fused_kernel(&x, &w).unwrap());
}

#[test]
fn rms_norm_linears_while_training_gives_the_separate_products_and_gradients() {
    let leaf = |shape: &[usize], seed| randn(shape, DType::F64, seed).requires_grad_().unwrap();
    let (x, g) = (leaf(&[2, 3, 16], 13), leaf(&[16], 14));
    let (wq, wk, wv) = (leaf(&[8, 16], 15), leaf(&[4, 16], 16), leaf(&[4, 16], 17));
    let probes: Vec<Tensor> = [8, 4, 4]
        .iter()
        .zip(18..)
        .map(|(&n, seed)| randn(&[2, 3, n], DType::F64, seed))
        .collect();
    // The fused form (one product, split) and the reference (three products), each backward
    // from the same weighted sum of its outputs.
    let fused = x.rms_norm_linears(&g, 1e-5, &[&wq, &wk, &wv]).unwrap();
    let normed = x.rms_norm(Some(&g), 1e-5).unwrap();
    let separate: Vec<Tensor> = [&wq, &wk, &wv].iter().map(|w| linear(w, &normed)).collect();
    let weigh = |outs: &[Tensor]| {
        outs.iter()
            .zip(&probes)
            .map(|(o, p)| o.mul(p).unwrap().sum().unwrap())
            .reduce(|a, b| a.add(&b).unwrap())
            .unwrap()
    };
    for (f, s) in fused.iter().zip(&separate) {
        assert!(
            f.sub(s)
                .unwrap()
                .abs()
                .unwrap()
                .max()
                .unwrap()
                .item()
                .unwrap()
                < 1e-12
        );
    }
    let params = [&x, &g, &wq, &wk, &wv];
    weigh(&fused).backward().unwrap();
    let fused_grads: Vec<Tensor> = params.iter().map(|p| p.grad().unwrap()).collect();
    params.iter().for_each(|p| p.set_grad(None));
    weigh(&separate).backward().unwrap();
    for (i, (p, fg)) in params.iter().zip(&fused_grads).enumerate() {
        let diff = fg
            .sub(&p.grad().unwrap())
            .unwrap()
            .abs()
            .unwrap()
            .max()
            .unwrap();
        assert!(diff.item().unwrap() < 1e-12, "parameter {i}");
    }
}
