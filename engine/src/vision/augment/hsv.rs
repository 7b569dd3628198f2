//! ultralytics' `RandomHSV`: RGB to 8-bit HSV, a lookup table per channel, and back, with
//! OpenCV's `cvtColor` arithmetic so pixels match `cv2.COLOR_BGR2HSV` / `COLOR_HSV2BGR`.
//!
//! - Forward (`RGB2HSV_b`): integer. `v = max`, `diff = max - min`,
//!   `s = (diff * sdiv[v] + 2^11) >> 12` with `sdiv[i] = round(255 * 2^12 / i)`, and the hue
//!   numerator (`g - b`, `b - r + 2 diff` or `r - g + 4 diff` by which channel is the max) times
//!   `hdiv[diff] = round(180 * 2^12 / (6 diff))`, rounded the same way, plus 180 when negative.
//! - Tables (`RandomHSV.apply_image`, in f64 as numpy): hue `(x + g_h * 180) mod 180` (numpy's
//!   floor modulo), saturation and value `clip(x * (1 + g), 0, 255)`, all truncated to u8, and
//!   saturation 0 kept at 0.
//! - Back (`HSV2RGB_b`, its SIMD path, which OpenCV runs on all but the last few pixels): f32,
//!   `h * (6 / 180)` split into sector and fraction by truncation, `s` and `v` scaled by
//!   `1 / 255`, the four candidates `v`, `v (1 - s)`, `v fma(-s, f, 1)`, `v fma(-s, 1 - f, 1)`
//!   (the fused forms are what the compiled OpenCV computes), times 255, truncated.
//!
//! Checked against opencv-python 5.0 on every 8-bit colour (forward) and every (h < 180, s, v)
//! (back): identical.

use image::RgbImage;

const HSV_SHIFT: i32 = 12;

/// The three per-channel tables of one draw of gains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HsvLut {
    pub hue: [u8; 256],
    pub sat: [u8; 256],
    pub val: [u8; 256],
}

impl HsvLut {
    /// The tables for gains `[hue, saturation, value]` (ultralytics' `r`, each already
    /// `uniform(-1, 1) * hsv_{h,s,v}`).
    pub fn new(gains: [f64; 3]) -> HsvLut {
        let hue_shift = gains[0] * 180.0;
        let hue = std::array::from_fn(|x| {
            let a = x as f64 + hue_shift;
            // numpy's float `%`: C's fmod, moved into [0, 180) when the signs differ.
            let mut m = a % 180.0;
            if m != 0.0 && m < 0.0 {
                m += 180.0;
            }
            m as u8
        });
        let scale = |g: f64| -> [u8; 256] {
            std::array::from_fn(|x| (x as f64 * (g + 1.0)).clamp(0.0, 255.0) as u8)
        };
        let mut sat = scale(gains[1]);
        // ultralytics keeps grey pixels grey (8.3.79).
        sat[0] = 0;
        HsvLut {
            hue,
            sat,
            val: scale(gains[2]),
        }
    }
}

/// Applies `RandomHSV` with the given gains in place. All-zero gains leave the image as is, as
/// ultralytics skips the round trip when every gain setting is 0 (not when a draw happens to
/// be 0, which still goes through the rounding of the conversion).
pub fn apply_hsv(img: &mut RgbImage, gains: [f64; 3]) {
    if gains == [0.0; 3] {
        return;
    }
    let lut = HsvLut::new(gains);
    let tables = HsvTables::get();
    #[cfg(target_arch = "x86_64")]
    {
        if super::simd::has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above), the features
            // `apply_lut_avx2_fma` is compiled for.
            unsafe { apply_lut_avx2_fma(img, &lut, tables) };
            return;
        }
    }
    apply_lut(img, &lut, tables);
}

/// `apply_lut` compiled for AVX2 and FMA, where its float half vectorises.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn apply_lut_avx2_fma(img: &mut RgbImage, lut: &HsvLut, tables: &HsvTables) {
    apply_lut(img, lut, tables);
}

/// Pixels per pass: the integer half (table lookups) runs over a chunk, then the float half
/// over the same chunk in a branch-free loop the compiler can vectorise.
const CHUNK: usize = 64;

#[inline(always)]
fn apply_lut(img: &mut RgbImage, lut: &HsvLut, tables: &HsvTables) {
    // A grey pixel (r = g = b) has hue 0 and saturation 0, so its result depends on its value
    // alone: a table, used for chunks that are all grey (the 114 padding of a mosaic).
    let grey: [u8; 256] =
        std::array::from_fn(|x| hsv_to_rgb([lut.hue[0], lut.sat[0], lut.val[x]])[0]);
    let (mut h, mut s, mut v) = ([0f32; CHUNK], [0f32; CHUNK], [0f32; CHUNK]);
    let (mut r, mut g, mut b) = ([0u8; CHUNK], [0u8; CHUNK], [0u8; CHUNK]);
    for chunk in img.as_mut().chunks_mut(CHUNK * 3) {
        if chunk
            .chunks_exact(3)
            .all(|px| px[0] == px[1] && px[1] == px[2])
        {
            for c in chunk.iter_mut() {
                *c = grey[*c as usize];
            }
            continue;
        }
        let n = chunk.len() / 3;
        for (i, px) in chunk.chunks_exact(3).enumerate() {
            let [hh, ss, vv] = tables.rgb_to_hsv([px[0], px[1], px[2]]);
            h[i] = lut.hue[hh as usize] as f32;
            s[i] = lut.sat[ss as usize] as f32;
            v[i] = lut.val[vv as usize] as f32;
        }
        for i in 0..n {
            [r[i], g[i], b[i]] = hsv_to_rgb_f32(h[i], s[i], v[i]);
        }
        for (i, px) in chunk.chunks_exact_mut(3).enumerate() {
            px.copy_from_slice(&[r[i], g[i], b[i]]);
        }
    }
}

/// `cv2.cvtColor(COLOR_RGB2HSV)` of one pixel: hue in [0, 180), saturation and value in [0, 255].
pub fn rgb_to_hsv(rgb: [u8; 3]) -> [u8; 3] {
    HsvTables::get().rgb_to_hsv(rgb)
}

/// `cv2.cvtColor(COLOR_HSV2RGB)` of one pixel (hue 180 and above wraps around, as in OpenCV).
pub fn hsv_to_rgb(hsv: [u8; 3]) -> [u8; 3] {
    hsv_to_rgb_f32(hsv[0] as f32, hsv[1] as f32, hsv[2] as f32)
}

/// [`hsv_to_rgb`] of 8-bit values given as floats, without branches.
#[inline(always)]
fn hsv_to_rgb_f32(h: f32, s: f32, v: f32) -> [u8; 3] {
    let h = h * (6.0f32 / 180.0);
    let s = s * (1.0f32 / 255.0);
    let v = v * (1.0f32 / 255.0);
    let pre_sector = h.trunc();
    let f = h - pre_sector;
    let sector = pre_sector - (pre_sector * (1.0f32 / 6.0)).trunc() * 6.0;
    let t0 = v;
    let t1 = v * (1.0 - s);
    let t2 = v * (-s).mul_add(f, 1.0);
    let t3 = v * (-s).mul_add(1.0 - f, 1.0);
    // OpenCV's `sector_data`: which candidate red, green and blue take in sectors 0..6.
    let pick = |by_sector: [f32; 6]| -> f32 {
        let mut out = by_sector[5];
        for k in (0..5).rev() {
            if sector == k as f32 {
                out = by_sector[k];
            }
        }
        out
    };
    let r = pick([t0, t2, t1, t1, t3, t0]);
    let g = pick([t3, t0, t0, t2, t1, t1]);
    let b = pick([t1, t1, t3, t0, t0, t2]);
    // Truncation toward zero; the products lie in [0, 255].
    [r, g, b].map(|c| (c * 255.0) as i32 as u8)
}

/// OpenCV's division tables for the forward conversion.
struct HsvTables {
    sdiv: [i32; 256],
    hdiv: [i32; 256],
}

impl HsvTables {
    fn get() -> &'static HsvTables {
        static TABLES: std::sync::OnceLock<HsvTables> = std::sync::OnceLock::new();
        TABLES.get_or_init(|| {
            let table = |num: f64, den: f64| -> [i32; 256] {
                std::array::from_fn(|i| {
                    if i == 0 {
                        0
                    } else {
                        (num / (den * i as f64)).round_ties_even() as i32
                    }
                })
            };
            HsvTables {
                sdiv: table((255 << HSV_SHIFT) as f64, 1.0),
                hdiv: table((180 << HSV_SHIFT) as f64, 6.0),
            }
        })
    }

    #[inline(always)]
    fn rgb_to_hsv(&self, [r8, g8, b8]: [u8; 3]) -> [u8; 3] {
        // Indexing the tables with bytes needs no bounds checks, so the loop stays branch-free.
        let (v8, min8) = (r8.max(g8).max(b8), r8.min(g8).min(b8));
        let diff8 = v8 - min8;
        let (r, g, b, v, diff) = (r8 as i32, g8 as i32, b8 as i32, v8 as i32, diff8 as i32);
        let half = 1 << (HSV_SHIFT - 1);
        let s = (diff * self.sdiv[v8 as usize] + half) >> HSV_SHIFT;
        let numerator = if v == r {
            g - b
        } else if v == g {
            b - r + 2 * diff
        } else {
            r - g + 4 * diff
        };
        let h = (numerator * self.hdiv[diff8 as usize] + half) >> HSV_SHIFT;
        let h = if h < 0 { h + 180 } else { h };
        [h as u8, s as u8, v8]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primaries_have_opencv_hues() {
        assert_eq!(rgb_to_hsv([255, 0, 0]), [0, 255, 255]);
        assert_eq!(rgb_to_hsv([0, 255, 0]), [60, 255, 255]);
        assert_eq!(rgb_to_hsv([0, 0, 255]), [120, 255, 255]);
        assert_eq!(rgb_to_hsv([128, 128, 128]), [0, 0, 128]);
        assert_eq!(hsv_to_rgb([60, 255, 255]), [0, 255, 0]);
        assert_eq!(hsv_to_rgb([0, 0, 77]), [77, 77, 77]);
    }

    #[test]
    fn lut_shifts_hue_modulo_180_and_scales_saturation_and_value() {
        let lut = HsvLut::new([0.01, -0.5, 0.3]);
        // 1.8 hue steps: 0 -> 1 (truncated), 179 -> 180.8 mod 180 = 0.8 -> 0.
        assert_eq!((lut.hue[0], lut.hue[179]), (1, 0));
        assert_eq!((lut.sat[0], lut.sat[200]), (0, 100));
        // 200 * 1.3 = 260 saturates.
        assert_eq!((lut.val[100], lut.val[200]), (130, 255));
        let neg = HsvLut::new([-0.01, 0.0, 0.0]);
        // -1.8: 0 -> 178.2 -> 178 (floor modulo, not C's fmod).
        assert_eq!(neg.hue[0], 178);
    }

    #[test]
    fn zero_gains_leave_the_image_untouched() {
        let mut img = RgbImage::from_fn(4, 3, |x, y| image::Rgb([x as u8 * 60, y as u8 * 90, 17]));
        let before = img.clone();
        apply_hsv(&mut img, [0.0; 3]);
        assert_eq!(img, before);
    }
}
