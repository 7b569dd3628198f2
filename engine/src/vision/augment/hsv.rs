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
        if std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports FMA (checked just above), the only feature
            // `apply_lut_fma` is compiled for.
            unsafe { apply_lut_fma(img, &lut, tables) };
            return;
        }
    }
    apply_lut(img, &lut, tables);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn apply_lut_fma(img: &mut RgbImage, lut: &HsvLut, tables: &HsvTables) {
    apply_lut(img, lut, tables);
}

#[inline(always)]
fn apply_lut(img: &mut RgbImage, lut: &HsvLut, tables: &HsvTables) {
    for px in img.as_mut().chunks_exact_mut(3) {
        let [h, s, v] = tables.rgb_to_hsv([px[0], px[1], px[2]]);
        let rgb = hsv_to_rgb([
            lut.hue[h as usize],
            lut.sat[s as usize],
            lut.val[v as usize],
        ]);
        px.copy_from_slice(&rgb);
    }
}

/// `cv2.cvtColor(COLOR_RGB2HSV)` of one pixel: hue in [0, 180), saturation and value in [0, 255].
pub fn rgb_to_hsv(rgb: [u8; 3]) -> [u8; 3] {
    HsvTables::get().rgb_to_hsv(rgb)
}

/// `cv2.cvtColor(COLOR_HSV2RGB)` of one pixel (hue 180 and above wraps around, as in OpenCV).
#[inline(always)]
pub fn hsv_to_rgb(hsv: [u8; 3]) -> [u8; 3] {
    let hscale = 6.0f32 / 180.0;
    let inv255 = 1.0f32 / 255.0;
    let h = hsv[0] as f32 * hscale;
    let s = hsv[1] as f32 * inv255;
    let v = hsv[2] as f32 * inv255;
    let pre_sector = h.trunc();
    let f = h - pre_sector;
    let sector = pre_sector - (pre_sector * (1.0f32 / 6.0)).trunc() * 6.0;
    let tab = [
        v,
        v * (1.0 - s),
        v * (-s).mul_add(f, 1.0),
        v * (-s).mul_add(1.0 - f, 1.0),
    ];
    // Which candidate each of (r, g, b) takes in sectors 0..6 (OpenCV's `sector_data`, whose
    // rows are (b, g, r)).
    const PICK: [[usize; 3]; 6] = [
        [0, 3, 1],
        [2, 0, 1],
        [1, 0, 3],
        [1, 2, 0],
        [3, 1, 0],
        [0, 1, 2],
    ];
    let pick = PICK[(sector as usize).min(5)];
    pick.map(|i| (tab[i] * 255.0).trunc().clamp(0.0, 255.0) as u8)
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
    fn rgb_to_hsv(&self, [r, g, b]: [u8; 3]) -> [u8; 3] {
        let (r, g, b) = (r as i32, g as i32, b as i32);
        let v = r.max(g).max(b);
        let diff = v - r.min(g).min(b);
        let half = 1 << (HSV_SHIFT - 1);
        let s = (diff * self.sdiv[v as usize] + half) >> HSV_SHIFT;
        let numerator = if v == r {
            g - b
        } else if v == g {
            b - r + 2 * diff
        } else {
            r - g + 4 * diff
        };
        let mut h = (numerator * self.hdiv[diff as usize] + half) >> HSV_SHIFT;
        if h < 0 {
            h += 180;
        }
        [h as u8, s as u8, v as u8]
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
