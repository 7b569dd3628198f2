//! The closeness measure the CUDA tests share: max|got - want| / max|want|.
// Each test that includes this file uses one of its two functions or both.
#![allow(dead_code)]

use rusting_brain::{DType, Device, Tensor};

/// max|got - want| / max|want| over two tensors of one shape, on any device and float dtype.
pub fn relative_error(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    let host = |t: &Tensor| -> Vec<f64> {
        let v: Vec<f32> = t.to(Device::Cpu, DType::F32).unwrap().to_vec().unwrap();
        v.into_iter().map(f64::from).collect()
    };
    let (g, w) = (host(got), host(want));
    let scale = w.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-6);
    worst_difference(&g, &w) / scale
}

/// The largest |got - want| over two lists of one length. Equal values (infinities too, NaN
/// beside NaN) differ by 0; a NaN on one side only is an infinite difference (`f64::max` would
/// skip it, so a NaN output would pass).
pub fn worst_difference(got: &[f64], want: &[f64]) -> f64 {
    got.iter().zip(want).fold(0.0, |worst, (a, b)| {
        if a == b || (a.is_nan() && b.is_nan()) {
            worst
        } else if a.is_nan() || b.is_nan() {
            f64::INFINITY
        } else {
            worst.max((a - b).abs())
        }
    })
}
