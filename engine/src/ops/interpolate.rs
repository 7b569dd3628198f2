//! Resampling along axes as sums of weighted gathers: each output position reads a few source
//! positions (two for linear, four for cubic) with weights that depend only on the sizes, so it
//! runs on every device through `index_select` and its gradient comes from that op. The ONNX
//! runtime's Resize and the vision families' position tables (torch's `interpolate`) share it.

use crate::{Error, Result, Tensor};

/// For each tap: the source index of every output position and its weight.
pub type Taps = Vec<(Vec<i64>, Vec<f64>)>;

/// Two taps per output: the source positions around `c` (clamped into the axis) with linear
/// weights.
pub fn linear_taps(coords: &[f64], size: usize) -> Taps {
    let last = size as i64 - 1;
    let mut lo = (Vec::new(), Vec::new());
    let mut hi = (Vec::new(), Vec::new());
    for &c in coords {
        let c = c.clamp(0.0, last as f64);
        let f = c.floor();
        let w = c - f;
        lo.0.push((f as i64).clamp(0, last));
        lo.1.push(1.0 - w);
        hi.0.push((f as i64 + 1).clamp(0, last));
        hi.1.push(w);
    }
    vec![lo, hi]
}

/// Four taps per output with Keys' cubic convolution kernel of coefficient `a` (-0.75 in torch
/// and ONNX, -0.5 in PIL). Taps outside the axis read its edge, or with `exclude_outside` get
/// weight 0 and the rest are renormalised.
pub fn cubic_taps(coords: &[f64], size: usize, a: f64, exclude_outside: bool) -> Taps {
    let last = size as i64 - 1;
    let kernel = |d: f64| {
        let d = d.abs();
        if d <= 1.0 {
            ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
        } else if d < 2.0 {
            ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
        } else {
            0.0
        }
    };
    let mut taps: Taps = vec![(Vec::new(), Vec::new()); 4];
    for &c in coords {
        let f = c.floor();
        let t = c - f;
        let mut w: Vec<f64> = (0..4).map(|k| kernel(t - (k as f64 - 1.0))).collect();
        let at: Vec<i64> = (0..4).map(|k| f as i64 + k - 1).collect();
        if exclude_outside {
            for k in 0..4 {
                if at[k] < 0 || at[k] > last {
                    w[k] = 0.0;
                }
            }
            let total: f64 = w.iter().sum();
            w.iter_mut().for_each(|v| *v /= total);
        }
        for k in 0..4 {
            taps[k].0.push(at[k].clamp(0, last));
            taps[k].1.push(w[k]);
        }
    }
    taps
}

/// Keys' cubic with a = -0.5 in Pillow's arrangement of the polynomial (torch's antialiased
/// resampling uses the same), so the weights round as theirs do. `cubic_taps` keeps torch's
/// own arrangement for its non-antialiased bicubic.
pub fn pil_cubic(x: f64) -> f64 {
    let (a, x) = (-0.5, x.abs());
    if x < 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * a
    } else {
        0.0
    }
}

/// The taps of torch's antialiased bicubic (`interpolate(..., antialias=True)`, PIL's
/// filter): when shrinking, the cubic kernel (coefficient -0.5) is stretched by the scale so
/// every source position contributes; each output's weights over the source positions in its
/// support sum to one. Outputs with fewer positions than the widest pad with zero weights.
pub fn antialias_cubic_taps(size: usize, out: usize) -> Taps {
    let kernel = pil_cubic;
    let scale = size as f64 / out as f64;
    let (support, invscale) = match scale >= 1.0 {
        true => (2.0 * scale, 1.0 / scale),
        false => (2.0, 1.0),
    };
    let rows: Vec<(i64, Vec<f64>)> = (0..out)
        .map(|i| {
            let center = scale * (i as f64 + 0.5);
            let lo = ((center - support + 0.5) as i64).max(0);
            let hi = ((center + support + 0.5) as i64).min(size as i64);
            let mut w: Vec<f64> = (lo..hi)
                .map(|j| kernel((j as f64 - center + 0.5) * invscale))
                .collect();
            let total: f64 = w.iter().sum();
            if total != 0.0 {
                w.iter_mut().for_each(|v| *v /= total);
            }
            (lo, w)
        })
        .collect();
    let width = rows.iter().map(|(_, w)| w.len()).max().unwrap_or(0);
    (0..width)
        .map(|k| {
            rows.iter()
                .map(|(lo, w)| match w.get(k) {
                    Some(&v) => (lo + k as i64, v),
                    None => (*lo, 0.0),
                })
                .unzip()
        })
        .collect()
}

/// Source coordinates of `out` positions resampling an axis of `size`, as torch computes them:
/// with `align_corners` the end points meet, else pixel centres (half-pixel).
pub fn torch_coords(size: usize, out: usize, align_corners: bool) -> Vec<f64> {
    (0..out)
        .map(|o| {
            let o = o as f64;
            if align_corners {
                if out > 1 {
                    o * (size as f64 - 1.0) / (out as f64 - 1.0)
                } else {
                    0.0
                }
            } else {
                (o + 0.5) * size as f64 / out as f64 - 0.5
            }
        })
        .collect()
}

impl Tensor {
    /// Σ over taps of `self` gathered along `axis` at the tap's indices, times its weights.
    pub fn resample_axis(&self, axis: usize, taps: &Taps) -> Result<Tensor> {
        let mut weight_shape = vec![1usize; self.rank()];
        let mut sum: Option<Tensor> = None;
        for (index, weights) in taps {
            let index =
                Tensor::from_vec(index.clone(), &[index.len()])?.to_device(self.device())?;
            let picked = self.index_select(axis as isize, &index)?;
            let term = if weights.iter().all(|&w| w == 1.0) {
                picked
            } else {
                weight_shape[axis] = weights.len();
                let w = Tensor::from_f64s(weights, &weight_shape, picked.dtype())?
                    .to_device(self.device())?;
                picked.mul(&w)?
            };
            sum = Some(match sum {
                Some(s) => s.add(&term)?,
                None => term,
            });
        }
        sum.ok_or_else(|| Error::invalid("resample_axis", "needs at least one tap"))
    }

    /// torch's `F.interpolate(x, size, mode="bicubic", align_corners)` for images
    /// [N, C, H, W] (no antialias).
    pub fn interpolate_bicubic(&self, size: (usize, usize), align_corners: bool) -> Result<Tensor> {
        self.bicubic(size, |n, out| {
            cubic_taps(&torch_coords(n, out, align_corners), n, -0.75, false)
        })
    }

    /// torch's `F.interpolate(x, size, mode="bicubic", align_corners=False, antialias=True)`
    /// for images [N, C, H, W].
    pub fn interpolate_bicubic_antialias(&self, size: (usize, usize)) -> Result<Tensor> {
        self.bicubic(size, antialias_cubic_taps)
    }

    /// Each spatial axis resampled with the taps `taps(size, out)` gives it.
    fn bicubic(&self, size: (usize, usize), taps: impl Fn(usize, usize) -> Taps) -> Result<Tensor> {
        if self.rank() != 4 || size.0 == 0 || size.1 == 0 {
            return Err(Error::invalid(
                "interpolate_bicubic",
                format!(
                    "needs images [N, C, H, W] and a size of at least 1x1, got {:?} to {size:?}",
                    self.shape()
                ),
            ));
        }
        let mut y = self.clone();
        for (axis, out) in [(2, size.0), (3, size.1)] {
            let n = self.shape()[axis];
            if n != out {
                y = y.resample_axis(axis, &taps(n, out))?;
            }
        }
        Ok(y)
    }
}
