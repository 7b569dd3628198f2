//! The closeness measure the CUDA tests share: max|got - want| / max|want|.

use rusting_brain::{DType, Device, Tensor};

/// max|got - want| / max|want| over two tensors of one shape, on any device and float dtype.
pub fn relative_error(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    let host =
        |t: &Tensor| -> Vec<f32> { t.to(Device::Cpu, DType::F32).unwrap().to_vec().unwrap() };
    let (g, w) = (host(got), host(want));
    let scale = w.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    let worst = g
        .iter()
        .zip(&w)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    (worst / scale) as f64
}
