//! 2-D max and average pooling and nearest upsampling over contiguous [N*C, H, W] planes.

use crate::spec::PoolGeometry;
use crate::WithDType;
use rayon::prelude::*;

/// Max pooling; also returns, for each output, the flat in-plane index of the chosen input.
pub fn max_pool2d<T: WithDType>(x: &[T], g: &PoolGeometry) -> (Vec<T>, Vec<usize>) {
    let (hw, ohw) = (g.h * g.w, g.ho * g.wo);
    let per_plane: Vec<(Vec<T>, Vec<usize>)> = (0..g.planes)
        .into_par_iter()
        .map(|p| {
            let plane = &x[p * hw..(p + 1) * hw];
            let (mut vals, mut idx) = (Vec::with_capacity(ohw), Vec::with_capacity(ohw));
            for oy in 0..g.ho {
                for ox in 0..g.wo {
                    let (ys, xs) = g.window(oy, ox);
                    let mut best: Option<(usize, T)> = None;
                    for y in ys {
                        for xx in xs.clone() {
                            let v = plane[y * g.w + xx];
                            if best.is_none_or(|(_, b)| v > b) {
                                best = Some((y * g.w + xx, v));
                            }
                        }
                    }
                    let (i, v) = best.unwrap_or((0, T::from_f64(f64::NEG_INFINITY)));
                    vals.push(v);
                    idx.push(i);
                }
            }
            (vals, idx)
        })
        .collect();
    let mut vals = Vec::with_capacity(g.planes * ohw);
    let mut idx = Vec::with_capacity(g.planes * ohw);
    for (v, i) in per_plane {
        vals.extend(v);
        idx.extend(i);
    }
    (vals, idx)
}

pub fn max_pool2d_backward<T: WithDType>(dy: &[T], argmax: &[usize], g: &PoolGeometry) -> Vec<T> {
    let (hw, ohw) = (g.h * g.w, g.ho * g.wo);
    let mut dx = vec![T::zero(); g.planes * hw];
    dx.par_chunks_mut(hw).enumerate().for_each(|(p, plane)| {
        for o in 0..ohw {
            let d = &mut plane[argmax[p * ohw + o]];
            *d = T::from_f64(d.to_f64() + dy[p * ohw + o].to_f64());
        }
    });
    dx
}

/// Average pooling that counts padding in the divisor (PyTorch's default).
pub fn avg_pool2d<T: WithDType>(x: &[T], g: &PoolGeometry) -> Vec<T> {
    let (hw, area) = (g.h * g.w, (g.kernel.0 * g.kernel.1) as f64);
    let mut out = vec![T::zero(); g.planes * g.ho * g.wo];
    out.par_chunks_mut(g.ho * g.wo)
        .enumerate()
        .for_each(|(p, o)| {
            let plane = &x[p * hw..(p + 1) * hw];
            for oy in 0..g.ho {
                for ox in 0..g.wo {
                    let (ys, xs) = g.window(oy, ox);
                    let s: f64 = ys
                        .flat_map(|y| xs.clone().map(move |xx| plane[y * g.w + xx].to_f64()))
                        .sum();
                    o[oy * g.wo + ox] = T::from_f64(s / area);
                }
            }
        });
    out
}

pub fn avg_pool2d_backward<T: WithDType>(dy: &[T], g: &PoolGeometry) -> Vec<T> {
    let (hw, area) = (g.h * g.w, (g.kernel.0 * g.kernel.1) as f64);
    let mut dx = vec![T::zero(); g.planes * hw];
    dx.par_chunks_mut(hw).enumerate().for_each(|(p, plane)| {
        for oy in 0..g.ho {
            for ox in 0..g.wo {
                let share = dy[p * g.ho * g.wo + oy * g.wo + ox].to_f64() / area;
                let (ys, xs) = g.window(oy, ox);
                for y in ys {
                    for xx in xs.clone() {
                        let d = &mut plane[y * g.w + xx];
                        *d = T::from_f64(d.to_f64() + share);
                    }
                }
            }
        }
    });
    dx
}

/// Nearest upsampling by integer factors of planes [planes, h, w] to [planes, h*sy, w*sx].
pub fn upsample_nearest<T: WithDType>(
    x: &[T],
    planes: usize,
    h: usize,
    w: usize,
    sy: usize,
    sx: usize,
) -> Vec<T> {
    let (oh, ow) = (h * sy, w * sx);
    let mut out = Vec::with_capacity(planes * oh * ow);
    for p in 0..planes {
        for y in 0..oh {
            let row = &x[(p * h + y / sy) * w..(p * h + y / sy + 1) * w];
            out.extend((0..ow).map(|xx| row[xx / sx]));
        }
    }
    out
}

pub fn upsample_nearest_backward<T: WithDType>(
    dy: &[T],
    planes: usize,
    h: usize,
    w: usize,
    sy: usize,
    sx: usize,
) -> Vec<T> {
    let (oh, ow) = (h * sy, w * sx);
    let mut dx = vec![0f64; planes * h * w];
    for p in 0..planes {
        for y in 0..oh {
            for xx in 0..ow {
                dx[(p * h + y / sy) * w + xx / sx] += dy[(p * oh + y) * ow + xx].to_f64();
            }
        }
    }
    dx.into_iter().map(T::from_f64).collect()
}
