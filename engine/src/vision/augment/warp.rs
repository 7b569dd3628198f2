//! Bilinear affine warp of 8-bit RGB images with OpenCV's `warpAffine(INTER_LINEAR,
//! BORDER_CONSTANT)` arithmetic, as opencv-python 4.11+ (and 5.0) computes it.
//!
//! ultralytics warps every training image with `cv2.warpAffine(img, M[:2], dsize, borderValue=114)`.
//! OpenCV inverts the forward matrix in f64 (its own closed form, kept here), rounds the inverse to
//! f32, and maps each destination pixel centre `(x, y)` to the source point
//! `sx = fma(m0, x, y * m1 + m2)`, `sy = fma(m3, x, y * m4 + m5)` (integer pixel centres, no
//! half-pixel shift). With `ix = floor(sx)` and `ax = sx - ix` (likewise for y) the four
//! neighbours blend in f32 as `v0 = fma(ax, p01 - p00, p00)`, `v1 = fma(ax, p11 - p10, p10)`,
//! `v = fma(ay, v1 - v0, v0)`, rounded half to even and saturated. A neighbour outside the
//! source takes the border value; a destination pixel whose whole 2x2 footprint is outside is
//! the border value itself. Since 4.11 this is OpenCV's float path (older versions used 5-bit
//! fixed-point weights and differ by a level here and there); checked bit for bit against
//! opencv-python 5.0 on random images and matrices (tests/fixtures/yolo/augment/).

use super::warp_separable::{is_separable, warp_separable};
use super::warp_source::WarpSource;
use image::RgbImage;

/// Warps `src` by the forward affine map `forward = [a, b, c, d, e, f]` (destination x =
/// a*x + b*y + c, destination y = d*x + e*y + f, in pixels) into a `dst_w` x `dst_h` image,
/// filling what no source pixel covers with `border` on every channel.
pub fn warp_affine(
    src: &RgbImage,
    forward: &[f64; 6],
    dst_w: usize,
    dst_h: usize,
    border: u8,
) -> RgbImage {
    warp_affine_from(src, forward, dst_w, dst_h, border)
}

/// [`warp_affine`] of any [`WarpSource`]. A map without rotation or shear takes the separable
/// path (the same pixels, reading only the source rows and columns it needs); any other
/// reads the whole source image.
pub fn warp_affine_from(
    src: &impl WarpSource,
    forward: &[f64; 6],
    dst_w: usize,
    dst_h: usize,
    border: u8,
) -> RgbImage {
    let inverse = invert_affine(forward).map(|v| v as f32);
    let out = if is_separable(&inverse) {
        warp_separable(src, &inverse, dst_w, dst_h, border)
    } else {
        warp_general(&src.to_image(), &inverse, dst_w, dst_h, border)
    };
    RgbImage::from_raw(dst_w as u32, dst_h as u32, out).unwrap_or_default()
}

/// The warp of any map by OpenCV's destination-to-source `inverse` (f32), pixel by pixel.
pub(crate) fn warp_general(
    src: &RgbImage,
    inverse: &[f32; 6],
    dst_w: usize,
    dst_h: usize,
    border: u8,
) -> Vec<u8> {
    let (sw, sh) = (src.width() as usize, src.height() as usize);
    let mut out = vec![border; dst_w * dst_h * 3];
    if sw > 0 && sh > 0 {
        let job = WarpJob {
            src: src.as_raw(),
            sw,
            sh,
            m: *inverse,
            dst_w,
            border,
        };
        job.run(&mut out);
    }
    out
}

/// OpenCV's inverse of a 2x3 affine matrix (`warpAffine` without `WARP_INVERSE_MAP`): a
/// singular matrix gives zeros, as there.
pub fn invert_affine(m: &[f64; 6]) -> [f64; 6] {
    let det = m[0] * m[4] - m[1] * m[3];
    let d = if det != 0.0 { 1.0 / det } else { 0.0 };
    let (a11, a22) = (m[4] * d, m[0] * d);
    let (a12, a21) = (m[1] * -d, m[3] * -d);
    let b1 = -a11 * m[2] - a12 * m[5];
    let b2 = -a21 * m[2] - a22 * m[5];
    [a11, a12, b1, a21, a22, b2]
}

struct WarpJob<'a> {
    src: &'a [u8],
    sw: usize,
    sh: usize,
    /// The destination-to-source map, rounded to f32 as OpenCV keeps it.
    m: [f32; 6],
    dst_w: usize,
    border: u8,
}

impl WarpJob<'_> {
    fn run(&self, out: &mut [u8]) {
        #[cfg(target_arch = "x86_64")]
        {
            if super::simd::has_avx2_fma() {
                // SAFETY: the CPU supports AVX2 and FMA (checked just above), the features
                // `run_avx2_fma` is compiled for.
                unsafe { self.run_avx2_fma(out) };
                return;
            }
        }
        // Without hardware FMA, `mul_add` still fuses (in software), so results are the same.
        self.run_rows(out, blend_inside);
    }

    /// The same loop compiled for AVX2 and FMA (`mul_add`, `floor` and rounding are single
    /// instructions), with the three channels of a pixel blended in one SSE register.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn run_avx2_fma(&self, out: &mut [u8]) {
        self.run_rows(out, |top, bottom, ax, ay, px| {
            if top.len() >= 7 && bottom.len() >= 7 {
                // The closure has this function's features, so the AVX2 kernel inlines;
                // both slices hold the 7 bytes its 4-byte loads read.
                x86::blend_inside(top, bottom, ax, ay, px)
            } else {
                blend_inside(top, bottom, ax, ay, px)
            }
        });
    }

    /// Row by row, in chunks: the source coordinates in a branch-free loop the compiler
    /// vectorises, then each pixel, through `inside` when its 2x2 footprint is in the source.
    #[inline(always)]
    fn run_rows(&self, out: &mut [u8], inside: impl Fn(&[u8], &[u8], f32, f32, &mut [u8])) {
        let row_len = self.dst_w * 3;
        if row_len == 0 {
            return;
        }
        let m = self.m;
        let (w, h) = (self.sw as i64, self.sh as i64);
        let (mut ax, mut ay) = ([0f32; CHUNK], [0f32; CHUNK]);
        let (mut ix, mut iy) = ([0i32; CHUNK], [0i32; CHUNK]);
        for (y, row) in out.chunks_exact_mut(row_len).enumerate() {
            let yf = y as f32;
            // OpenCV rounds the row's offset to f32 before the per-pixel fma.
            let row_x = yf * m[1] + m[2];
            let row_y = yf * m[4] + m[5];
            for (k, chunk) in row.chunks_mut(CHUNK * 3).enumerate() {
                let n = chunk.len() / 3;
                for i in 0..n {
                    let xf = (k * CHUNK + i) as f32;
                    let sx = m[0].mul_add(xf, row_x);
                    let sy = m[3].mul_add(xf, row_y);
                    let (fx, fy) = (sx.floor(), sy.floor());
                    (ax[i], ay[i]) = (sx - fx, sy - fy);
                    (ix[i], iy[i]) = (fx as i32, fy as i32);
                }
                for (i, px) in chunk.chunks_exact_mut(3).enumerate() {
                    let (x0, y0) = (ix[i] as i64, iy[i] as i64);
                    if x0 >= 0 && x0 < w - 1 && y0 >= 0 && y0 < h - 1 {
                        let top = (y0 as usize * self.sw + x0 as usize) * 3;
                        let bottom = top + self.sw * 3;
                        inside(&self.src[top..], &self.src[bottom..], ax[i], ay[i], px);
                    } else {
                        self.blend_edge(x0, y0, ax[i], ay[i], px);
                    }
                }
            }
        }
    }

    /// A pixel whose footprint is partly or wholly outside the source: the missing neighbours
    /// take the border value (so a footprint wholly outside gives the border itself).
    #[inline(always)]
    fn blend_edge(&self, ix: i64, iy: i64, ax: f32, ay: f32, px: &mut [u8]) {
        let (w, h) = (self.sw as i64, self.sh as i64);
        for (c, out) in px.iter_mut().enumerate() {
            let p = |dx: i64, dy: i64| -> f32 {
                let (xx, yy) = (ix + dx, iy + dy);
                if xx >= 0 && xx < w && yy >= 0 && yy < h {
                    self.src[(yy as usize * self.sw + xx as usize) * 3 + c] as f32
                } else {
                    self.border as f32
                }
            };
            *out = blend([p(0, 0), p(1, 0), p(0, 1), p(1, 1)], ax, ay);
        }
    }
}

/// Destination pixels per pass of the coordinate loop.
const CHUNK: usize = 64;

/// The three channels of a pixel whose footprint starts at `top[0]` and `bottom[0]` (each the
/// pixel and its right neighbour, 6 bytes).
#[inline(always)]
fn blend_inside(top: &[u8], bottom: &[u8], ax: f32, ay: f32, px: &mut [u8]) {
    for c in 0..3 {
        let p = [top[c], top[c + 3], bottom[c], bottom[c + 3]].map(f32::from);
        px[c] = blend(p, ax, ay);
    }
}

/// The pixel blend in one SSE register (lanes r, g, b and a spare), the same operations as
/// [`blend`] lane by lane.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Four bytes from `bytes` widened to f32 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn lanes(bytes: &[u8]) -> __m128 {
        let word = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        _mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(word as i32)))
    }

    /// `top` and `bottom` hold at least 7 bytes (the 4-byte loads at offset 3 read one past
    /// the pixel pair).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn blend_inside(top: &[u8], bottom: &[u8], ax: f32, ay: f32, px: &mut [u8]) {
        let (p00, p01) = (lanes(top), lanes(&top[3..]));
        let (p10, p11) = (lanes(bottom), lanes(&bottom[3..]));
        let (ax, ay) = (_mm_set1_ps(ax), _mm_set1_ps(ay));
        let v0 = _mm_fmadd_ps(ax, _mm_sub_ps(p01, p00), p00);
        let v1 = _mm_fmadd_ps(ax, _mm_sub_ps(p11, p10), p10);
        let v = _mm_fmadd_ps(ay, _mm_sub_ps(v1, v0), v0);
        // `round_to_u8` per lane: the low byte of each lane after adding 2^23.
        let bits = _mm_castps_si128(_mm_add_ps(v, _mm_set1_ps(8_388_608.0)));
        let bytes = _mm_shuffle_epi8(
            bits,
            _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
        );
        let rgb = (_mm_cvtsi128_si32(bytes) as u32).to_le_bytes();
        px[..3].copy_from_slice(&rgb[..3]);
    }
}

/// OpenCV's bilinear blend of `[p00, p01, p10, p11]` at fractions (ax, ay), rounded half to
/// even and saturated.
#[inline(always)]
fn blend([p00, p01, p10, p11]: [f32; 4], ax: f32, ay: f32) -> u8 {
    let v0 = ax.mul_add(p01 - p00, p00);
    let v1 = ax.mul_add(p11 - p10, p10);
    let v = ay.mul_add(v1 - v0, v0);
    round_to_u8(v)
}

/// `v` in [-0.5, 255.5) rounded half to even, as `cvRound` does, without branches: adding
/// 2^23 leaves the rounded integer in the low mantissa bits (the FPU rounds to nearest even).
/// A blend of bytes never leaves that range.
#[inline(always)]
pub(crate) fn round_to_u8(v: f32) -> u8 {
    (v + 8_388_608.0).to_bits() as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;

    #[test]
    fn inverse_undoes_the_forward_map() {
        let m = [1.3, 0.2, -7.0, -0.1, 0.7, 11.5];
        let inv = invert_affine(&m);
        let (x, y) = (3.0, -4.0);
        let (u, v) = (m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5]);
        let back = (
            inv[0] * u + inv[1] * v + inv[2],
            inv[3] * u + inv[4] * v + inv[5],
        );
        assert!((back.0 - x).abs() < 1e-12 && (back.1 - y).abs() < 1e-12);
    }

    #[test]
    fn identity_warp_copies_and_pads_with_the_border() {
        let src = RgbImage::from_fn(5, 4, |x, y| Rgb([x as u8 * 40, y as u8 * 50, 7]));
        let out = warp_affine(&src, &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0], 7, 6, 114);
        for y in 0..6 {
            for x in 0..7 {
                // The last column and row sit exactly on source pixels (the outside neighbour
                // has weight 0); everything past them is the border.
                let want = if x < 5 && y < 4 {
                    *src.get_pixel(x, y)
                } else {
                    Rgb([114; 3])
                };
                assert_eq!(*out.get_pixel(x, y), want, "({x}, {y})");
            }
        }
    }

    #[test]
    fn half_pixel_shift_averages_neighbours_and_the_border() {
        // Destination x maps to source x - 0.5: a blend of two columns, and of column 0 with
        // the border at x = 0.
        let src = RgbImage::from_fn(3, 1, |x, _| Rgb([[10, 20, 31][x as usize]; 3]));
        let out = warp_affine(&src, &[1.0, 0.0, 0.5, 0.0, 1.0, 0.0], 4, 1, 114);
        let row: Vec<u8> = (0..4).map(|x| out.get_pixel(x, 0)[0]).collect();
        // (114 + 10) / 2 = 62, (10 + 20) / 2 = 15, (20 + 31) / 2 = 25.5 -> 26 (half to even),
        // (31 + 114) / 2 = 72.5 -> 72.
        assert_eq!(row, [62, 15, 26, 72]);
    }
}
