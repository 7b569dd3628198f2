//! Resize of 8-bit images with Pillow's arithmetic (`Image.resize` with BICUBIC or BILINEAR),
//! bit for bit, because the image processors of transformers' vision checkpoints resize with
//! Pillow and a model's accuracy depends on its inputs matching.
//!
//! Pillow resamples each axis with a filter stretched by the scale when shrinking (so it
//! antialiases): output `i` reads the source pixels within `support · scale` of its centre
//! `(i + 0.5) · scale`, with weights `filter((j - centre + 0.5) / scale)` normalised to sum to
//! one. The weights become fixed-point integers with 22 fractional bits (rounded half away
//! from zero), each pass accumulates from a half (`1 << 21`) and clips to 0..=255, and the
//! horizontal pass runs before the vertical one, with the intermediate image in 8 bits.

use super::RgbImage;

/// Fractional bits of the fixed-point weights (Pillow's `PRECISION_BITS`, 32 - 8 - 2).
const PRECISION_BITS: u32 = 22;

/// Pillow's resampling filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PilFilter {
    /// Pillow's BILINEAR (2): the triangle filter, support 1.
    Bilinear,
    /// Pillow's BICUBIC (3): Keys' cubic with a = -0.5, support 2.
    Bicubic,
    /// Pillow's LANCZOS (1): sinc(x)·sinc(x/3), support 3 (diffusers' image resize).
    Lanczos,
}

impl PilFilter {
    /// Pillow's numeric resample code, as image processor configs store it (`resample`).
    pub fn from_code(code: u64) -> Option<PilFilter> {
        match code {
            1 => Some(PilFilter::Lanczos),
            2 => Some(PilFilter::Bilinear),
            3 => Some(PilFilter::Bicubic),
            _ => None,
        }
    }

    /// The code `from_code` reads.
    pub fn code(self) -> u64 {
        match self {
            PilFilter::Lanczos => 1,
            PilFilter::Bilinear => 2,
            PilFilter::Bicubic => 3,
        }
    }

    fn support(self) -> f64 {
        match self {
            PilFilter::Bilinear => 1.0,
            PilFilter::Bicubic => 2.0,
            PilFilter::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        let x = x.abs();
        match self {
            PilFilter::Bilinear => (1.0 - x).max(0.0),
            PilFilter::Bicubic => crate::ops::interpolate::pil_cubic(x),
            PilFilter::Lanczos if x < 3.0 => sinc(x) * sinc(x / 3.0),
            PilFilter::Lanczos => 0.0,
        }
    }
}

/// sin(πx)/(πx), 1 at 0 (Pillow's `sinc_filter`).
fn sinc(x: f64) -> f64 {
    match x {
        0.0 => 1.0,
        _ => {
            let px = std::f64::consts::PI * x;
            px.sin() / px
        }
    }
}

/// One output position: the first source index and the fixed-point weights from there.
struct Coeffs {
    first: usize,
    weights: Vec<i32>,
}

/// Pillow's `precompute_coeffs` and `normalize_coeffs_8bpc` for one axis.
fn coeffs(src: usize, dst: usize, filter: PilFilter) -> Vec<Coeffs> {
    let scale = src as f64 / dst as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let inv = 1.0 / filterscale;
    (0..dst)
        .map(|i| {
            let center = (i as f64 + 0.5) * scale;
            let lo = ((center - support + 0.5) as i64).max(0) as usize;
            let hi = ((center + support + 0.5) as i64)
                .min(src as i64)
                .max(lo as i64) as usize;
            let raw: Vec<f64> = (lo..hi)
                .map(|j| filter.weight((j as f64 - center + 0.5) * inv))
                .collect();
            let total: f64 = raw.iter().sum();
            let one = (1u64 << PRECISION_BITS) as f64;
            let weights = raw
                .iter()
                .map(|&w| {
                    let w = if total != 0.0 { w / total } else { w };
                    // C's (int) cast truncates toward zero after the half is added.
                    (if w < 0.0 {
                        -0.5 + w * one
                    } else {
                        0.5 + w * one
                    }) as i32
                })
                .collect();
            Coeffs { first: lo, weights }
        })
        .collect()
}

fn clip8(acc: i64) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// One pass along x (`horizontal`) or y over interleaved RGB rows.
fn pass(src: &[u8], (w, h): (usize, usize), out: usize, horizontal: bool, f: PilFilter) -> Vec<u8> {
    let half = 1i64 << (PRECISION_BITS - 1);
    let (ow, oh) = if horizontal { (out, h) } else { (w, out) };
    let table = coeffs(if horizontal { w } else { h }, out, f);
    let mut dst = vec![0u8; ow * oh * 3];
    for y in 0..oh {
        for x in 0..ow {
            let c = &table[if horizontal { x } else { y }];
            for ch in 0..3 {
                let mut acc = half;
                for (k, &wt) in c.weights.iter().enumerate() {
                    let (sx, sy) = match horizontal {
                        true => (c.first + k, y),
                        false => (x, c.first + k),
                    };
                    acc += src[(sy * w + sx) * 3 + ch] as i64 * wt as i64;
                }
                dst[(y * ow + x) * 3 + ch] = clip8(acc);
            }
        }
    }
    dst
}

/// `img.resize((dst_w, dst_h), filter)` as Pillow computes it.
pub fn resize_pil(img: &RgbImage, dst_w: usize, dst_h: usize, filter: PilFilter) -> RgbImage {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let mut data = img.as_raw().clone();
    let mut size = (w, h);
    if dst_w != w {
        data = pass(&data, size, dst_w, true, filter);
        size.0 = dst_w;
    }
    if dst_h != h {
        data = pass(&data, size, dst_h, false, filter);
        size.1 = dst_h;
    }
    RgbImage::from_raw(size.0 as u32, size.1 as u32, data).expect("the passes fill w x h x 3")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_size_is_a_copy_and_weights_sum_to_one() {
        let img = RgbImage::from_fn(5, 4, |x, y| ::image::Rgb([x as u8 * 40, y as u8 * 60, 7]));
        assert_eq!(resize_pil(&img, 5, 4, PilFilter::Bicubic), img);
        for (src, dst) in [(224, 100), (10, 37), (7, 7)] {
            for c in coeffs(src, dst, PilFilter::Bicubic) {
                let sum: i64 = c.weights.iter().map(|&w| w as i64).sum();
                assert!((sum - (1 << PRECISION_BITS)).abs() <= c.weights.len() as i64);
            }
        }
    }

    #[test]
    fn lanczos_is_pillows_byte_for_byte() {
        // tests/fixtures/image_processor/lanczos.json: Pillow 13's Image.resize(LANCZOS).
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/image_processor/lanczos.json");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let bytes = |p: &serde_json::Value| -> Vec<u8> {
            p.as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u8)
                .collect()
        };
        let size = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap() as u32;
        let src =
            RgbImage::from_raw(size(&v, "width"), size(&v, "height"), bytes(&v["pixels"])).unwrap();
        for r in v["resized"].as_array().unwrap() {
            let (w, h) = (size(r, "width"), size(r, "height"));
            let out = resize_pil(&src, w as usize, h as usize, PilFilter::Lanczos);
            assert_eq!(out.into_raw(), bytes(&r["pixels"]), "{w}x{h}");
        }
    }

    #[test]
    fn a_flat_image_stays_flat_when_shrunk_or_grown() {
        let img = RgbImage::from_pixel(9, 6, ::image::Rgb([200, 13, 255]));
        for (w, h) in [(4, 3), (20, 11)] {
            let out = resize_pil(&img, w, h, PilFilter::Bicubic);
            assert!(out.pixels().all(|p| p.0 == [200, 13, 255]));
        }
    }
}
