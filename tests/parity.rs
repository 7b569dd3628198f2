//! Comparing our outputs with a reference implementation's.

use rusting_brain::Tensor;

/// The largest difference between `got` and `want`, relative to `want`'s largest magnitude
/// (at least 1), must be below `tol`; shapes must be equal.
pub fn assert_close(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    let err = worst_difference(&g, &w) / scale;
    assert!(
        err < tol,
        "{what}: relative error {err:.2e} (tolerance {tol:.0e})"
    );
}

/// The largest |got - want| over two lists of one length; a NaN on one side only counts as an
/// infinite difference (`f64::max` would skip it, so a NaN output would pass), NaN on both as
/// none.
pub fn worst_difference(got: &[f64], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .fold(0.0, |worst, (a, b)| match (a.is_nan(), b.is_nan()) {
            (true, true) => worst,
            (false, false) if a == b => worst,
            (false, false) => worst.max((a - b).abs()),
            _ => f64::INFINITY,
        })
}
