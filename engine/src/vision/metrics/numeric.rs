//! NumPy's float64 arithmetic where ultralytics' metrics depend on it, reproduced operation by
//! operation so that results agree to the last bit (or to a few ulps where NumPy calls BLAS).
//!
//! - `linspace`: `arange(num) * step + start`, with the last point set to `stop`.
//! - `interp`: `np.interp` (the search for `xp[j] <= x < xp[j + 1]`, the slope formula, the
//!   exact-hit and end rules).
//! - `sum`: `np.add.reduce` on a float64 vector, which is pairwise: blocks of up to 128 are
//!   summed with eight interleaved accumulators, longer runs split in halves (multiples of 8).
//! - `trapezoid`: `sum(diff(x) * (y[1:] + y[:-1]) / 2.0)`.
//! - `smooth`: ultralytics' box filter, `np.convolve` over the edge-padded signal. NumPy forms
//!   each output with a BLAS dot product whose summation order we do not reproduce; the result
//!   only feeds an argmax.

/// `np.linspace(start, stop, num)` (endpoint included).
pub fn linspace(start: f64, stop: f64, num: usize) -> Vec<f64> {
    if num == 0 {
        return Vec::new();
    }
    if num == 1 {
        return vec![start];
    }
    let step = (stop - start) / (num - 1) as f64;
    let mut y: Vec<f64> = (0..num).map(|i| i as f64 * step + start).collect();
    y[num - 1] = stop;
    y
}

/// `np.interp(x, xp, fp, left, right)` for one point; `xp` must be non-decreasing and as long
/// as `fp` (not empty). `left`/`right` default to `fp[0]`/`fp[last]` in NumPy.
pub fn interp(x: f64, xp: &[f64], fp: &[f64], left: f64, right: f64) -> f64 {
    let n = xp.len();
    if x.is_nan() {
        return x;
    }
    if n == 1 {
        return if x < xp[0] {
            left
        } else if x > xp[0] {
            right
        } else {
            fp[0]
        };
    }
    if x > xp[n - 1] {
        return right;
    }
    if x < xp[0] {
        return left;
    }
    // The last j with xp[j] <= x, which NumPy's guessed binary search also lands on.
    let j = xp.partition_point(|&v| v <= x) - 1;
    if j == n - 1 || xp[j] == x {
        return fp[j];
    }
    let slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
    let y = slope * (x - xp[j]) + fp[j];
    if !y.is_nan() {
        return y;
    }
    // NumPy retries from the right end, then falls back to a flat segment's value.
    let y = slope * (x - xp[j + 1]) + fp[j + 1];
    if y.is_nan() && fp[j] == fp[j + 1] {
        fp[j]
    } else {
        y
    }
}

/// `np.interp` over many points.
pub fn interp_many(x: &[f64], xp: &[f64], fp: &[f64], left: f64, right: f64) -> Vec<f64> {
    x.iter().map(|&v| interp(v, xp, fp, left, right)).collect()
}

/// `np.sum` of a float64 vector: NumPy's pairwise summation.
pub fn sum(a: &[f64]) -> f64 {
    0.0 + pairwise_sum(a)
}

/// `np.mean` of a float64 vector (`sum / n`; NaN when empty, as NumPy warns and returns).
pub fn mean(a: &[f64]) -> f64 {
    sum(a) / a.len() as f64
}

fn pairwise_sum(a: &[f64]) -> f64 {
    const BLOCK: usize = 128;
    let n = a.len();
    if n < 8 {
        let mut res = -0.0;
        for &v in a {
            res += v;
        }
        res
    } else if n <= BLOCK {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let whole = n - n % 8;
        let mut i = 8;
        while i < whole {
            for (k, acc) in r.iter_mut().enumerate() {
                *acc += a[i + k];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for &v in &a[whole..] {
            res += v;
        }
        res
    } else {
        let mut half = n / 2;
        half -= half % 8;
        pairwise_sum(&a[..half]) + pairwise_sum(&a[half..])
    }
}

/// `np.trapezoid(y, x)`.
pub fn trapezoid(y: &[f64], x: &[f64]) -> f64 {
    let terms: Vec<f64> = (1..y.len().min(x.len()))
        .map(|i| (x[i] - x[i - 1]) * (y[i] + y[i - 1]) / 2.0)
        .collect();
    sum(&terms)
}

/// ultralytics' `smooth(y, f)`: a box filter of odd width `round(len * f * 2) // 2 + 1` over
/// `y` padded with copies of its end values, giving `len(y)` outputs.
pub fn smooth(y: &[f64], f: f64) -> Vec<f64> {
    if y.is_empty() {
        return Vec::new();
    }
    let width = (y.len() as f64 * f * 2.0).round_ties_even() as usize / 2 + 1;
    let pad = width / 2;
    let mut padded = vec![y[0]; pad];
    padded.extend_from_slice(y);
    padded.extend(std::iter::repeat_n(y[y.len() - 1], pad));
    let weight = 1.0 / width as f64;
    padded
        .windows(width)
        .map(|w| w.iter().fold(0.0, |acc, &v| acc + v * weight))
        .collect()
}

/// `np.argmax`: the first index of the largest value (NaN counts as largest).
pub fn argmax(a: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in a.iter().enumerate() {
        if a[best].is_nan() {
            break;
        }
        if v.is_nan() || v > a[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linspace_multiplies_the_index_by_the_step_and_pins_the_end() {
        let x = linspace(0.0, 1.0, 101);
        assert_eq!(x[35], 35.0 * 0.01);
        assert_ne!(x[35], 35.0 / 100.0);
        assert_eq!(x[100], 1.0);
    }

    #[test]
    fn interp_follows_numpy_at_ends_ties_and_between_points() {
        let xp = [0.0, 1.0, 1.0, 2.0];
        let fp = [0.0, 10.0, 20.0, 30.0];
        assert_eq!(interp(-1.0, &xp, &fp, -5.0, 99.0), -5.0);
        assert_eq!(interp(3.0, &xp, &fp, -5.0, 99.0), 99.0);
        // On a repeated xp the last of the equal points wins.
        assert_eq!(interp(1.0, &xp, &fp, 0.0, 0.0), 20.0);
        assert_eq!(interp(0.5, &xp, &fp, 0.0, 0.0), 5.0);
        assert_eq!(interp(1.5, &xp, &fp, 0.0, 0.0), 25.0);
        assert_eq!(interp(2.0, &xp, &fp, 0.0, 0.0), 30.0);
    }

    #[test]
    fn sum_is_pairwise_like_numpy() {
        // 1e16 + 1 + ... loses the ones sequentially; numpy's 8 accumulators keep some.
        // Values checked with numpy 2.4: np.sum of this array.
        let mut a = vec![1.0f64; 20];
        a[0] = 1e16;
        assert_eq!(sum(&a), 1e16 + 16.0);
        let sequential = a.iter().fold(0.0, |s, v| s + v);
        assert_ne!(sum(&a), sequential);
    }

    #[test]
    fn trapezoid_integrates_a_line_exactly() {
        let x = linspace(0.0, 1.0, 11);
        let y: Vec<f64> = x.iter().map(|v| 2.0 * v).collect();
        assert!((trapezoid(&y, &x) - 1.0).abs() < 1e-15);
    }

    #[test]
    fn smooth_keeps_the_length_and_flattens_a_spike() {
        let mut y = vec![0.0; 100];
        y[50] = 21.0;
        let s = smooth(&y, 0.1);
        assert_eq!(s.len(), 100);
        // Width round(100 * 0.1 * 2) // 2 + 1 = 11: the spike spreads over 11 outputs.
        assert_eq!(s.iter().filter(|&&v| v > 0.0).count(), 11);
        assert!((s[50] - 21.0 / 11.0).abs() < 1e-12);
    }

    #[test]
    fn argmax_returns_the_first_maximum() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    }
}
