//! The closeness measure the CUDA tests share: max|got - want| / max|want|.

use rusting_brain::{DType, Device, Tensor};

/// max|got - want| / max|want| over two tensors of one shape, on any device and float dtype.
pub fn relative_error(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    let host =
        |t: &Tensor| -> Vec<f32> { t.to(Device::Cpu, DType::F32).unwrap().to_vec().unwrap() };
    let (g, w) = (host(got), host(want));
    let scale = w.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    // Equal values (infinities too, NaN beside NaN) differ by 0; a NaN on one side fails
    // (f32::max would skip it).
    let worst = g.iter().zip(&w).fold(0f32, |m, (a, b)| {
        let d = match a == b || (a.is_nan() && b.is_nan()) {
            true => 0.0,
            false => (a - b).abs(),
        };
        if d.is_nan() {
            f32::INFINITY
        } else {
            m.max(d)
        }
    });
    (worst / scale) as f64
}
