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
//!
//! Speed: chunks of one grey level take a table; otherwise, on x86 CPUs with AVX2, the integer
//! half runs eight pixels at a time (tested equal to the scalar half on every colour) and the
//! float half is a branch-free loop the compiler vectorises.

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
    #[cfg(target_arch = "x86_64")]
    {
        if super::simd::has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above), the features
            // `apply_lut_avx2_fma` is compiled for.
            unsafe { apply_lut_avx2_fma(img, &lut) };
            return;
        }
    }
    let tables = HsvTables::get();
    apply_lut(
        img,
        &lut,
        |chunk, h, s, v| chunk_to_hsv(chunk, &lut, tables, h, s, v),
        interleave,
    );
}

/// `apply_lut` compiled for AVX2 and FMA: the integer half eight pixels at a time, the float
/// half vectorised by the compiler.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn apply_lut_avx2_fma(img: &mut RgbImage, lut: &HsvLut) {
    let float_lut = x86::FloatLut::new(lut);
    // The closure has this function's features, so the AVX2 kernel is safe to call and inlines.
    apply_lut(
        img,
        lut,
        |chunk, h, s, v| x86::chunk_to_hsv(chunk, &float_lut, h, s, v),
        |r, g, b, chunk| x86::interleave(r, g, b, chunk),
    );
}

/// Pixels per pass: the integer half (table lookups) runs over a chunk, then the float half
/// over the same chunk in a branch-free loop the compiler can vectorise.
const CHUNK: usize = 64;

/// The integer half pixel by pixel: one chunk's pixels to their looked-up hue, saturation and
/// value, as floats.
fn chunk_to_hsv(
    chunk: &[u8],
    lut: &HsvLut,
    tables: &HsvTables,
    h: &mut [f32; CHUNK],
    s: &mut [f32; CHUNK],
    v: &mut [f32; CHUNK],
) {
    for (i, px) in chunk.chunks_exact(3).enumerate() {
        let [hh, ss, vv] = tables.rgb_to_hsv([px[0], px[1], px[2]]);
        h[i] = lut.hue[hh as usize] as f32;
        s[i] = lut.sat[ss as usize] as f32;
        v[i] = lut.val[vv as usize] as f32;
    }
}

#[inline(always)]
fn apply_lut(
    img: &mut RgbImage,
    lut: &HsvLut,
    to_hsv: impl Fn(&[u8], &mut [f32; CHUNK], &mut [f32; CHUNK], &mut [f32; CHUNK]),
    interleave: impl Fn(&[u8; CHUNK], &[u8; CHUNK], &[u8; CHUNK], &mut [u8]),
) {
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
        to_hsv(chunk, &mut h, &mut s, &mut v);
        for i in 0..n {
            [r[i], g[i], b[i]] = hsv_to_rgb_f32(h[i], s[i], v[i]);
        }
        interleave(&r, &g, &b, chunk);
    }
}

/// Planes of red, green and blue back into a chunk's interleaved pixels, pixel by pixel.
fn interleave(r: &[u8; CHUNK], g: &[u8; CHUNK], b: &[u8; CHUNK], chunk: &mut [u8]) {
    for (i, px) in chunk.chunks_exact_mut(3).enumerate() {
        px.copy_from_slice(&[r[i], g[i], b[i]]);
    }
}

/// The integer half (`RGB2HSV_b` and the tables) eight pixels at a time. No gathers (slow on
/// many x86 CPUs, and slower still with the Gather Data Sampling mitigation): the division
/// tables are recomputed by f32 division, which gives every entry of both (the test on every
/// colour covers every index), and the per-image lookups stay scalar.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{HsvLut, CHUNK, HSV_SHIFT};
    use std::arch::x86_64::*;

    /// The three tables as floats, what the float half takes.
    pub(super) struct FloatLut {
        hue: [f32; 256],
        sat: [f32; 256],
        val: [f32; 256],
    }

    impl FloatLut {
        pub(super) fn new(lut: &HsvLut) -> FloatLut {
            FloatLut {
                hue: lut.hue.map(f32::from),
                sat: lut.sat.map(f32::from),
                val: lut.val.map(f32::from),
            }
        }
    }

    /// `round(numerator / x)`, half to even, and 0 where `x` is 0: OpenCV's `sdiv` (numerator
    /// `255 << 12`) and `hdiv` (`(180 << 12) / 6`) tables at `x` in 0..256.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn division_table(numerator: f32, x: __m256i) -> __m256i {
        let q = _mm256_div_ps(_mm256_set1_ps(numerator), _mm256_cvtepi32_ps(x));
        // The default rounding mode is to nearest, ties to even.
        let nonzero = _mm256_xor_si256(
            _mm256_cmpeq_epi32(x, _mm256_setzero_si256()),
            _mm256_set1_epi32(-1),
        );
        _mm256_and_si256(_mm256_cvtps_epi32(q), nonzero)
    }

    /// Eight bytes from `bytes[at..]` widened to i32 lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn widen(bytes: &[u8; CHUNK], at: usize) -> __m256i {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        _mm256_cvtepu8_epi32(_mm_set1_epi64x(i64::from_le_bytes(word)))
    }

    /// Eight i32 lanes into `dst`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn store(lanes: __m256i, dst: &mut [i32]) {
        let mut v = [0i32; 8];
        // SAFETY: `v` holds the eight lanes stored.
        unsafe { _mm256_storeu_si256(v.as_mut_ptr() as *mut __m256i, lanes) };
        dst.copy_from_slice(&v);
    }

    /// `pshufb` masks that gather channel `c` of 16 pixels from register `k` of their 48 bytes
    /// (`[c][k]`, -1 where a lane takes nothing from that register).
    const SPLIT: [[[i8; 16]; 3]; 3] = {
        let mut m = [[[-1i8; 16]; 3]; 3];
        let mut pos = 0;
        while pos < 48 {
            m[pos % 3][pos / 16][pos / 3] = (pos % 16) as i8;
            pos += 1;
        }
        m
    };

    /// `pshufb` masks that place channel `c` of 16 pixels into register `k` of their 48
    /// interleaved bytes (`[k][c]`).
    const MERGE: [[[i8; 16]; 3]; 3] = {
        let mut m = [[[-1i8; 16]; 3]; 3];
        let mut pos = 0;
        while pos < 48 {
            m[pos / 16][pos % 3][pos % 16] = (pos / 3) as i8;
            pos += 1;
        }
        m
    };

    /// The first 16 of `bytes`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn load(bytes: &[u8]) -> __m128i {
        let mut lanes = [0u8; 16];
        lanes.copy_from_slice(&bytes[..16]);
        // SAFETY: `lanes` holds the 16 bytes loaded.
        unsafe { _mm_loadu_si128(lanes.as_ptr().cast()) }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn mask(lanes: &[i8; 16]) -> __m128i {
        // SAFETY: `lanes` holds the 16 bytes loaded.
        unsafe { _mm_loadu_si128(lanes.as_ptr().cast()) }
    }

    /// `v` into the first 16 of `bytes`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn store16(v: __m128i, bytes: &mut [u8]) {
        let mut lanes = [0u8; 16];
        // SAFETY: `lanes` holds the 16 bytes stored.
        unsafe { _mm_storeu_si128(lanes.as_mut_ptr().cast(), v) };
        bytes[..16].copy_from_slice(&lanes);
    }

    /// `_mm_shuffle_epi8` of three registers by three masks, or-ed together.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn shuffle3(regs: [__m128i; 3], masks: &[[i8; 16]; 3]) -> __m128i {
        let [m0, m1, m2] = masks;
        _mm_or_si128(
            _mm_or_si128(
                _mm_shuffle_epi8(regs[0], mask(m0)),
                _mm_shuffle_epi8(regs[1], mask(m1)),
            ),
            _mm_shuffle_epi8(regs[2], mask(m2)),
        )
    }

    /// A chunk's pixels split into red, green and blue planes: 16 pixels per three shuffles
    /// each for a whole chunk, pixel by pixel for a short last one.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn deinterleave(chunk: &[u8], r: &mut [u8; CHUNK], g: &mut [u8; CHUNK], b: &mut [u8; CHUNK]) {
        if chunk.len() != CHUNK * 3 {
            for (i, px) in chunk.chunks_exact(3).enumerate().take(CHUNK) {
                (r[i], g[i], b[i]) = (px[0], px[1], px[2]);
            }
            return;
        }
        for (group, bytes) in chunk.chunks_exact(48).enumerate() {
            let regs = [0, 16, 32].map(|at| load(&bytes[at..]));
            let at = group * 16;
            for (c, plane) in [&mut *r, &mut *g, &mut *b].into_iter().enumerate() {
                store16(shuffle3(regs, &SPLIT[c]), &mut plane[at..]);
            }
        }
    }

    /// [`super::interleave`] with shuffles, 16 pixels at a time, for a whole chunk.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn interleave(r: &[u8; CHUNK], g: &[u8; CHUNK], b: &[u8; CHUNK], chunk: &mut [u8]) {
        if chunk.len() != CHUNK * 3 {
            return super::interleave(r, g, b, chunk);
        }
        for (group, bytes) in chunk.chunks_exact_mut(48).enumerate() {
            let at = group * 16;
            let planes = [load(&r[at..]), load(&g[at..]), load(&b[at..])];
            for (k, reg) in bytes.chunks_exact_mut(16).enumerate() {
                store16(shuffle3(planes, &MERGE[k]), reg);
            }
        }
    }

    /// [`super::chunk_to_hsv`] with the same integer operations in eight lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn chunk_to_hsv(
        chunk: &[u8],
        lut: &FloatLut,
        h: &mut [f32; CHUNK],
        s: &mut [f32; CHUNK],
        v: &mut [f32; CHUNK],
    ) {
        let (mut r8, mut g8, mut b8) = ([0u8; CHUNK], [0u8; CHUNK], [0u8; CHUNK]);
        deinterleave(chunk, &mut r8, &mut g8, &mut b8);
        let half = _mm256_set1_epi32(1 << (HSV_SHIFT - 1));
        let n = (chunk.len() / 3).min(CHUNK);
        let (mut hi, mut si, mut vi) = ([0i32; CHUNK], [0i32; CHUNK], [0i32; CHUNK]);
        // Lanes past `n` hold zeros or stale pixels; their results are never read.
        for at in (0..n).step_by(8) {
            let (r, g, b) = (widen(&r8, at), widen(&g8, at), widen(&b8, at));
            let max = _mm256_max_epi32(_mm256_max_epi32(r, g), b);
            let min = _mm256_min_epi32(_mm256_min_epi32(r, g), b);
            let diff = _mm256_sub_epi32(max, min);
            let sdiv = division_table((255 << HSV_SHIFT) as f32, max);
            let sat = _mm256_srai_epi32::<HSV_SHIFT>(_mm256_add_epi32(
                _mm256_mullo_epi32(diff, sdiv),
                half,
            ));
            // The hue numerator by which channel is the max, red first, then green.
            let from_r = _mm256_sub_epi32(g, b);
            let from_g = _mm256_add_epi32(_mm256_sub_epi32(b, r), _mm256_slli_epi32::<1>(diff));
            let from_b = _mm256_add_epi32(_mm256_sub_epi32(r, g), _mm256_slli_epi32::<2>(diff));
            let is_r = _mm256_cmpeq_epi32(max, r);
            let is_g = _mm256_cmpeq_epi32(max, g);
            let numerator =
                _mm256_blendv_epi8(_mm256_blendv_epi8(from_b, from_g, is_g), from_r, is_r);
            let hdiv = division_table((180 << HSV_SHIFT) as f32 / 6.0, diff);
            let hue = _mm256_srai_epi32::<HSV_SHIFT>(_mm256_add_epi32(
                _mm256_mullo_epi32(numerator, hdiv),
                half,
            ));
            let negative = _mm256_cmpgt_epi32(_mm256_setzero_si256(), hue);
            let hue = _mm256_add_epi32(hue, _mm256_and_si256(negative, _mm256_set1_epi32(180)));
            store(hue, &mut hi[at..at + 8]);
            store(sat, &mut si[at..at + 8]);
            store(max, &mut vi[at..at + 8]);
        }
        // The per-image tables, indexed by the low byte as the scalar half's `as u8` does.
        for i in 0..n {
            h[i] = lut.hue[hi[i] as u8 as usize];
            s[i] = lut.sat[si[i] as u8 as usize];
            v[i] = lut.val[vi[i] as u8 as usize];
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
    [r, g, b].map(|c| trunc_to_u8(c * 255.0))
}

/// `v as i32 as u8` for `v` in [0, 256) (the products above, which lie in [0, 255]), without
/// the saturating cast's branches, so the loop vectorises: the truncated value plus 2^23
/// leaves the integer in the low mantissa bits.
#[inline(always)]
fn trunc_to_u8(v: f32) -> u8 {
    (v.trunc() + 8_388_608.0).to_bits() as u8
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

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_integer_half_equals_the_scalar_one_on_every_colour() {
        if !crate::vision::augment::simd::has_avx2_fma() {
            return;
        }
        let tables = HsvTables::get();
        for gains in [[0.013, -0.6, 0.35], [-0.015, 0.7, -0.4]] {
            let lut = HsvLut::new(gains);
            let float_lut = x86::FloatLut::new(&lut);
            let mut want = ([0f32; CHUNK], [0f32; CHUNK], [0f32; CHUNK]);
            let mut got = want;
            // Every colour once, in chunks of 64 pixels, and a short last chunk of 5.
            let all: Vec<u8> = (0..1u32 << 24)
                .flat_map(|c| [c as u8, (c >> 8) as u8, (c >> 16) as u8])
                .collect();
            for chunk in all.chunks(CHUNK * 3).chain([&all[..15]]) {
                chunk_to_hsv(chunk, &lut, tables, &mut want.0, &mut want.1, &mut want.2);
                // SAFETY: the CPU has AVX2 (checked above).
                unsafe { x86::chunk_to_hsv(chunk, &float_lut, &mut got.0, &mut got.1, &mut got.2) };
                let n = chunk.len() / 3;
                assert_eq!(
                    (&got.0[..n], &got.1[..n], &got.2[..n]),
                    (&want.0[..n], &want.1[..n], &want.2[..n]),
                    "chunk starting at {:?}",
                    &chunk[..3]
                );
            }
        }
    }

    #[test]
    fn trunc_to_u8_matches_the_saturating_cast_on_0_to_256() {
        let step = |v: f32, by: i32| f32::from_bits((v.to_bits() as i32 + by) as u32);
        for i in 0..256 {
            let k = i as f32;
            let mut values = vec![k, k + 0.5, k + 0.999, step(k, 1), step(k + 1.0, -1)];
            values.extend((0..64).map(|j| k + j as f32 / 64.0));
            for v in values.into_iter().filter(|v| (0.0..256.0).contains(v)) {
                assert_eq!(trunc_to_u8(v), v as i32 as u8, "{v}");
            }
        }
        assert_eq!(trunc_to_u8(-0.0), 0);
    }

    #[test]
    fn apply_hsv_equals_the_portable_path_pixel_for_pixel() {
        // An odd size (a short last chunk) with a band of grey rows (whole grey chunks).
        let bytes = crate::random::Generator::new(5).integers(0, 256, 203 * 157 * 3);
        let mut img =
            RgbImage::from_raw(203, 157, bytes.iter().map(|&b| b as u8).collect()).unwrap();
        for y in 40..60 {
            for x in 0..203 {
                img.put_pixel(x, y, image::Rgb([114; 3]));
            }
        }
        for gains in [[0.013, -0.6, 0.35], [-0.015, 0.7, -0.4]] {
            let lut = HsvLut::new(gains);
            let mut want = img.clone();
            apply_lut(
                &mut want,
                &lut,
                |chunk, h, s, v| chunk_to_hsv(chunk, &lut, HsvTables::get(), h, s, v),
                interleave,
            );
            let mut got = img.clone();
            apply_hsv(&mut got, gains);
            assert!(got == want, "gains {gains:?}");
        }
    }

    #[test]
    fn zero_gains_leave_the_image_untouched() {
        let mut img = RgbImage::from_fn(4, 3, |x, y| image::Rgb([x as u8 * 60, y as u8 * 90, 17]));
        let before = img.clone();
        apply_hsv(&mut img, [0.0; 3]);
        assert_eq!(img, before);
    }
}
