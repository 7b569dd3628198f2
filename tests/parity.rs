//! Comparing our outputs with a reference implementation's.

use rusting_brain::Tensor;

/// The largest difference between `got` and `want`, relative to `want`'s largest magnitude
/// (at least 1), must be below `tol`; shapes must be equal.
pub fn assert_close(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    let err = g
        .iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
        / scale;
    assert!(
        err < tol,
        "{what}: relative error {err:.2e} (tolerance {tol:.0e})"
    );
}
