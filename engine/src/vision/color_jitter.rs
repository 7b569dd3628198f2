//! torchvision's `ColorJitter(brightness, contrast, saturation, hue)` on 8-bit RGB images, in
//! the arithmetic of its PIL path (what timm and torchvision's ImageNet recipes run): Pillow's
//! `ImageEnhance` blends for brightness, contrast and saturation (`Image.blend` in f32,
//! truncated to u8, clipped when extrapolating) and a hue shift through Pillow's 8-bit HSV
//! conversion. The four adjustments run in a random order with factors drawn uniformly, as
//! `ColorJitter.get_params` draws them.

use super::RgbImage;
use crate::{Error, Generator, Result};

/// The jitter's strengths, as torchvision's constructor takes them: brightness, contrast and
/// saturation factors are drawn from `[max(0, 1 - s), 1 + s]`, the hue shift from `[-h, h]`
/// (h at most 0.5, a half turn).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ColorJitter {
    pub brightness: f64,
    pub contrast: f64,
    pub saturation: f64,
    pub hue: f64,
}

impl ColorJitter {
    pub fn new(brightness: f64, contrast: f64, saturation: f64, hue: f64) -> Result<ColorJitter> {
        for (name, v) in [
            ("brightness", brightness),
            ("contrast", contrast),
            ("saturation", saturation),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(Error::invalid(
                    "color_jitter",
                    format!("{name} must be a non-negative number, not {v}"),
                ));
            }
        }
        if !(0.0..=0.5).contains(&hue) {
            return Err(Error::invalid(
                "color_jitter",
                format!("hue must be in [0, 0.5] (a fraction of a turn), not {hue}"),
            ));
        }
        Ok(ColorJitter {
            brightness,
            contrast,
            saturation,
            hue,
        })
    }

    /// The image with the four adjustments applied in a random order.
    pub fn apply(&self, img: &RgbImage, gen: &mut Generator) -> RgbImage {
        let u = gen.uniform(7);
        let factor = |strength: f64, u: f64| {
            let lo = (1.0 - strength).max(0.0);
            lo + (1.0 + strength - lo) * u
        };
        let mut order = [0usize, 1, 2, 3];
        // Fisher-Yates with the last three draws.
        for (i, ui) in (1..4).rev().zip(&u[4..7]) {
            let j = ((ui * (i + 1) as f64) as usize).min(i);
            order.swap(i, j);
        }
        let mut out = img.clone();
        for step in order {
            out = match step {
                0 if self.brightness > 0.0 => {
                    adjust_brightness(&out, factor(self.brightness, u[0]))
                }
                1 if self.contrast > 0.0 => adjust_contrast(&out, factor(self.contrast, u[1])),
                2 if self.saturation > 0.0 => {
                    adjust_saturation(&out, factor(self.saturation, u[2]))
                }
                3 if self.hue > 0.0 => adjust_hue(&out, self.hue * (2.0 * u[3] - 1.0)),
                _ => out,
            };
        }
        out
    }
}

/// Pillow's `Image.blend(degenerate, img, alpha)` for one channel value: f32 arithmetic,
/// truncated; outside [0, 1] the result is clipped to 0..=255 first.
fn blend(degenerate: u8, value: u8, alpha: f32) -> u8 {
    let v = degenerate as i32 as f32 + alpha * (value as i32 - degenerate as i32) as f32;
    if (0.0..=1.0).contains(&alpha) {
        v as u8
    } else {
        v.clamp(0.0, 255.0) as u8
    }
}

/// Every pixel blended with its degenerate pixel, as `ImageEnhance`'s `enhance(factor)`.
fn enhance(img: &RgbImage, factor: f64, degenerate: impl Fn(&[u8; 3]) -> [u8; 3]) -> RgbImage {
    let alpha = factor as f32;
    if alpha == 1.0 {
        return img.clone();
    }
    let mut out = img.clone();
    for p in out.pixels_mut() {
        let d = degenerate(&p.0);
        p.0 = [
            blend(d[0], p.0[0], alpha),
            blend(d[1], p.0[1], alpha),
            blend(d[2], p.0[2], alpha),
        ];
    }
    out
}

/// Pillow's RGB to L: ITU-R 601-2 luma in 16-bit fixed point, rounded.
pub fn luma(p: &[u8; 3]) -> u8 {
    ((p[0] as u32 * 19595 + p[1] as u32 * 38470 + p[2] as u32 * 7471 + 0x8000) >> 16) as u8
}

/// `ImageEnhance.Brightness`: a blend with black.
pub fn adjust_brightness(img: &RgbImage, factor: f64) -> RgbImage {
    enhance(img, factor, |_| [0, 0, 0])
}

/// `ImageEnhance.Contrast`: a blend with the image's mean luma (rounded half up).
pub fn adjust_contrast(img: &RgbImage, factor: f64) -> RgbImage {
    let pixels = img.pixels().len().max(1) as f64;
    let total: u64 = img.pixels().map(|p| luma(&p.0) as u64).sum();
    let mean = (total as f64 / pixels + 0.5) as u8;
    enhance(img, factor, |_| [mean; 3])
}

/// `ImageEnhance.Color`: a blend with the pixel's own luma.
pub fn adjust_saturation(img: &RgbImage, factor: f64) -> RgbImage {
    enhance(img, factor, |p| [luma(p); 3])
}

/// torchvision's PIL `adjust_hue`: to Pillow's 8-bit HSV, the hue byte shifted by
/// `hue * 255` (truncated, wrapping round the circle), back to RGB.
pub fn adjust_hue(img: &RgbImage, hue: f64) -> RgbImage {
    let shift = (hue * 255.0) as i32 as u8;
    let mut out = img.clone();
    for p in out.pixels_mut() {
        let [h, s, v] = rgb_to_hsv(&p.0);
        p.0 = hsv_to_rgb([h.wrapping_add(shift), s, v]);
    }
    out
}

/// Pillow's RGB to HSV (colorsys' formulas, each channel scaled to a byte by truncation).
fn rgb_to_hsv(p: &[u8; 3]) -> [u8; 3] {
    let [r, g, b] = *p;
    let (maxc, minc) = (r.max(g).max(b), r.min(g).min(b));
    if maxc == minc {
        return [0, 0, maxc];
    }
    let cr = (maxc - minc) as f32;
    let s = cr / maxc as f32;
    let rc = (maxc - r) as f32 / cr;
    let gc = (maxc - g) as f32 / cr;
    let bc = (maxc - b) as f32 / cr;
    // C's promotions: the sums with 2.0 and 4.0 run in f64 and are stored as f32.
    let h: f32 = if r == maxc {
        bc - gc
    } else if g == maxc {
        (2.0 + rc as f64 - bc as f64) as f32
    } else {
        (4.0 + gc as f64 - rc as f64) as f32
    };
    let h = ((h as f64 / 6.0 + 1.0) % 1.0) as f32;
    let byte = |x: f32| ((x as f64 * 255.0) as i32).clamp(0, 255) as u8;
    [byte(h), byte(s), maxc]
}

/// Pillow's HSV to RGB (colorsys' six sectors; p, q, t rounded half away from zero).
fn hsv_to_rgb(hsv: [u8; 3]) -> [u8; 3] {
    let [h, s, v] = hsv;
    if s == 0 {
        return [v, v, v];
    }
    let sector = (h as f32 as f64 * 6.0 / 255.0).floor() as i32;
    let f = (h as f32 as f64 * 6.0 / 255.0 - sector as f64) as f32;
    let fs = (s as f32 as f64 / 255.0) as f32;
    let v64 = v as f32 as f64;
    let byte = |x: f64| (x.round() as i32).clamp(0, 255) as u8;
    let p = byte(v64 * (1.0 - fs as f64));
    let q = byte(v64 * (1.0 - (fs * f) as f64));
    let t = byte(v64 * (1.0 - fs as f64 * (1.0 - f as f64)));
    match sector % 6 {
        0 => [v, t, p],
        1 => [q, v, p],
        2 => [p, v, t],
        3 => [p, q, v],
        4 => [t, p, v],
        _ => [v, p, q],
    }
}
