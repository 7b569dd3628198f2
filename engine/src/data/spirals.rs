//! The synthetic two-spirals classification set (seeded): two interleaved arms, one per class,
//! each a point reflection of the other. No straight line separates them, so a model must learn
//! a curved boundary; a small MLP gets close to 100%, a linear model stays near 50%.

use crate::{Error, Generator, Result, Tensor};

/// Turns each arm makes from the centre to the rim.
const TURNS: f64 = 1.5;

/// `n_per_class` points per class: features [2n, 2] (f32), labels [2n] (i64; the first n are
/// class 0). Point i of class 0 sits at radius r = 0.1 + 0.9 i/n and angle 2 pi TURNS i/n (plus
/// a random jitter along the arm, so a new seed gives new points); class 1 is its reflection
/// through the origin. `noise` is the standard deviation of Gaussian noise added to each
/// coordinate; the arms are about 0.3 apart, so noise up to ~0.05 keeps the classes separable.
pub fn two_spirals(
    n_per_class: usize,
    noise: f64,
    gen: &mut Generator,
) -> Result<(Tensor, Tensor)> {
    if !(noise.is_finite() && noise >= 0.0) {
        return Err(Error::invalid(
            "two_spirals",
            format!("noise must be finite and >= 0, got {noise}"),
        ));
    }
    let n = n_per_class;
    let along = gen.uniform(n);
    let jitter = gen.normal(4 * n);
    let mut features = Vec::with_capacity(4 * n);
    for class in 0..2 {
        let sign = if class == 0 { 1.0 } else { -1.0 };
        for (i, u) in along.iter().enumerate() {
            let t = (i as f64 + u) / n.max(1) as f64;
            let (r, angle) = (0.1 + 0.9 * t, std::f64::consts::TAU * TURNS * t);
            let k = 2 * (class * n + i);
            features.push((sign * r * angle.cos() + noise * jitter[k]) as f32);
            features.push((sign * r * angle.sin() + noise * jitter[k + 1]) as f32);
        }
    }
    let labels: Vec<i64> = (0..2 * n).map(|i| (i >= n) as i64).collect();
    Ok((
        Tensor::from_vec(features, &[2 * n, 2])?,
        Tensor::from_vec(labels, &[2 * n])?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_spirals_have_balanced_labels_and_repeat_for_a_seed() {
        let (x, y) = two_spirals(50, 0.02, &mut Generator::new(4)).unwrap();
        assert_eq!(
            (x.shape(), y.shape()),
            ([100, 2].as_slice(), [100].as_slice())
        );
        let labels = y.to_vec::<i64>().unwrap();
        assert_eq!(labels.iter().filter(|&&l| l == 1).count(), 50);
        let again = two_spirals(50, 0.02, &mut Generator::new(4)).unwrap().0;
        assert_eq!(x.to_vec_f32().unwrap(), again.to_vec_f32().unwrap());
        let other = two_spirals(50, 0.02, &mut Generator::new(5)).unwrap().0;
        assert_ne!(x.to_vec_f32().unwrap(), other.to_vec_f32().unwrap());
    }

    #[test]
    fn two_spirals_without_noise_are_point_reflections_within_the_unit_disc() {
        let (x, _) = two_spirals(20, 0.0, &mut Generator::new(0)).unwrap();
        let v = x.to_vec_f32().unwrap();
        for i in 0..20 {
            assert_eq!(v[2 * i], -v[2 * (20 + i)]);
            assert_eq!(v[2 * i + 1], -v[2 * (20 + i) + 1]);
            assert!(v[2 * i].hypot(v[2 * i + 1]) <= 1.0 + 1e-6);
        }
    }
}
