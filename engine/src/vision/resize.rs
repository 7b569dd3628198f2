//! Bilinear resize of 8-bit images with OpenCV's `INTER_LINEAR` arithmetic, bit for bit.
//!
//! ultralytics resizes with `cv2.resize(..., INTER_LINEAR)`, so a model's accuracy on our
//! inputs depends on matching it. OpenCV maps destination pixel `d` to source coordinate
//! `(d + 0.5) * scale - 0.5` (half-pixel centres), computed in f32, with `scale = 1 / (dst /
//! src)` in f64. Horizontally, the weights are `round(2048 * (1 - f))` and `round(2048 * f)`
//! (each rounded on its own), a coordinate left of the first pixel or at/after the last one
//! takes that edge pixel alone, and the row sums stay in i32 (11 fractional bits).
//! Vertically, out-of-range rows are clamped (keeping their weights) and two rows combine as
//! OpenCV's SIMD path does: `((r0 >> 4) * b0 >> 16) + ((r1 >> 4) * b1 >> 16)`, then `+ 2 >> 2`
//! and saturation. Checked against opencv-python 4.12 on random images and `bus.jpg`: identical
//! (tests/fixtures/yolo/make_resize_fixture.py makes the fixtures the tests compare with).
//! No antialiasing when shrinking, as in OpenCV.

use image::RgbImage;

const COEF_SCALE: f32 = 2048.0;

/// One destination coordinate: the first source index and the two fixed-point weights.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Tap {
    index: isize,
    w0: i32,
    w1: i32,
}

/// The taps along one axis, before any clamping.
fn taps(src: usize, dst: usize) -> Vec<Tap> {
    let scale = 1.0 / (dst as f64 / src as f64);
    (0..dst)
        .map(|d| {
            let f = ((d as f64 + 0.5) * scale - 0.5) as f32;
            let index = f.floor();
            let frac = f - index;
            Tap {
                index: index as isize,
                w0: ((1.0 - frac) * COEF_SCALE).round_ties_even() as i32,
                w1: (frac * COEF_SCALE).round_ties_even() as i32,
            }
        })
        .collect()
}

/// Resizes an RGB image to `dst_w` x `dst_h` as `cv2.resize(INTER_LINEAR)` does. Sizes of 0
/// give an empty image.
pub fn resize_linear(src: &RgbImage, dst_w: usize, dst_h: usize) -> RgbImage {
    let (sw, sh) = (src.width() as usize, src.height() as usize);
    if (sw, sh) == (dst_w, dst_h) {
        return src.clone();
    }
    let data = resize_linear_raw(src.as_raw(), sw, sh, 3, dst_w, dst_h);
    RgbImage::from_raw(dst_w as u32, dst_h as u32, data).unwrap_or_default()
}

/// Interleaved `cn`-channel u8 pixels, `sw` x `sh`, resized to `dw` x `dh`.
pub fn resize_linear_raw(
    src: &[u8],
    sw: usize,
    sh: usize,
    cn: usize,
    dw: usize,
    dh: usize,
) -> Vec<u8> {
    if sw == 0 || sh == 0 || dw == 0 || dh == 0 || src.len() < sw * sh * cn {
        return vec![0; dw * dh * cn];
    }
    let xtaps: Vec<Tap> = taps(sw, dw)
        .into_iter()
        .map(|t| {
            if t.index < 0 {
                Tap {
                    index: 0,
                    w0: 2048,
                    w1: 0,
                }
            } else if t.index as usize >= sw - 1 {
                Tap {
                    index: sw as isize - 1,
                    w0: 2048,
                    w1: 0,
                }
            } else {
                t
            }
        })
        .collect();
    let ytaps = taps(sh, dh);
    // Horizontal pass of one source row into fixed-point sums; each row used is made once.
    let hrow = |y: usize| -> Vec<i32> {
        let row = &src[y * sw * cn..(y + 1) * sw * cn];
        let mut out = Vec::with_capacity(dw * cn);
        for t in &xtaps {
            let i0 = t.index as usize * cn;
            let i1 = (t.index as usize + 1).min(sw - 1) * cn;
            for c in 0..cn {
                out.push(row[i0 + c] as i32 * t.w0 + row[i1 + c] as i32 * t.w1);
            }
        }
        out
    };
    let clamp_row = |y: isize| y.clamp(0, sh as isize - 1) as usize;
    let mut rows: Vec<Option<Vec<i32>>> = vec![None; sh];
    let mut out = Vec::with_capacity(dw * dh * cn);
    let mut freed = 0;
    for t in &ytaps {
        let (y0, y1) = (clamp_row(t.index), clamp_row(t.index + 1));
        for y in [y0, y1] {
            if rows[y].is_none() {
                rows[y] = Some(hrow(y));
            }
        }
        // Rows above y0 are never needed again (the taps only move down).
        for row in rows.iter_mut().take(y0).skip(freed) {
            *row = None;
        }
        freed = freed.max(y0);
        let s0 = rows[y0].as_deref().unwrap_or_default();
        let s1 = rows[y1].as_deref().unwrap_or_default();
        for (&s0, &s1) in s0.iter().zip(s1) {
            let v = (((s0 >> 4) * t.w0) >> 16) + (((s1 >> 4) * t.w1) >> 16);
            out.push(((v + 2) >> 2).clamp(0, 255) as u8);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taps_use_half_pixel_centres() {
        // Doubling: destination 0 sits at source -0.25, 1 at 0.25, 2 at 0.75.
        let t = taps(4, 8);
        assert_eq!(
            t[0],
            Tap {
                index: -1,
                w0: 512,
                w1: 1536
            }
        );
        assert_eq!(
            t[1],
            Tap {
                index: 0,
                w0: 1536,
                w1: 512
            }
        );
        assert_eq!(
            t[2],
            Tap {
                index: 0,
                w0: 512,
                w1: 1536
            }
        );
    }

    #[test]
    fn constant_image_stays_constant() {
        let src = vec![77u8; 13 * 7 * 3];
        for (dw, dh) in [(5, 3), (26, 14), (40, 9)] {
            assert!(resize_linear_raw(&src, 13, 7, 3, dw, dh)
                .iter()
                .all(|&v| v == 77));
        }
    }
}
