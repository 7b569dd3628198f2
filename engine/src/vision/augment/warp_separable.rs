//! The bilinear warp of [`super::warp`] for maps without rotation or shear (scale and
//! translation only: ultralytics' default `degrees = shear = perspective = 0`), bit for bit the
//! same pixels, in two passes.
//!
//! When the destination-to-source map has no cross terms, OpenCV's source x of a destination
//! pixel depends on its column alone and the source y on its row alone (the zero terms add
//! exact zeros). The general blend `v0 = fma(ax, p01 - p00, p00)`, `v1` likewise on the next
//! row, `v = fma(ay, v1 - v0, v0)` then splits into a horizontal pass, `v0` for every column of
//! one source row (made once per source row, not once per destination pixel), and a vertical
//! pass over whole rows that vectorises. Neighbours outside the source read the border value
//! from padding around the row, which is what the general path substitutes for them, so every
//! blend sees the same four values and does the same operations.

use super::warp::round_to_u8;
use super::warp_source::WarpSource;

/// Padding columns on each side of a source row: a footprint starting two columns left of the
/// source, or at its right edge, reads only padding.
const PAD: i64 = 2;

/// Whether OpenCV's destination-to-source map `m` (f32, as the warp keeps it) has no cross
/// terms, so [`warp_separable`] gives the general warp's pixels.
pub(super) fn is_separable(m: &[f32; 6]) -> bool {
    m[1] == 0.0 && m[3] == 0.0
}

/// Where each destination column reads in a padded source row.
struct Columns {
    /// Per destination byte (3 per pixel): the index, in a padded row of floats, of its
    /// channel in the left neighbour (the right one is 3 further).
    index: Vec<i32>,
    /// Per destination byte: the fraction `ax` of its pixel.
    weight: Vec<f32>,
    /// The padded columns a row needs: `lo..hi` (padded column `p` is source column `p - PAD`).
    lo: i64,
    hi: i64,
}

impl Columns {
    fn new(m: &[f32; 6], sw: usize, dst_w: usize) -> Columns {
        // The general path's `row_x` at row 0, which is every row's (`y * 0` is a zero).
        let row_x = 0f32 * m[1] + m[2];
        let taps: Vec<(i64, f32)> = (0..dst_w)
            .map(|x| {
                let sx = m[0].mul_add(x as f32, row_x);
                let fx = sx.floor();
                let ix = (fx as i32 as i64).clamp(-PAD, sw as i64);
                (ix + PAD, sx - fx)
            })
            .collect();
        let lo = taps.iter().map(|t| t.0).min().unwrap_or(0);
        let hi = taps.iter().map(|t| t.0).max().unwrap_or(0) + 2;
        let mut index = Vec::with_capacity(dst_w * 3);
        let mut weight = Vec::with_capacity(dst_w * 3);
        for &(p, ax) in &taps {
            for c in 0..3 {
                index.push(((p - lo) * 3 + c) as i32);
                weight.push(ax);
            }
        }
        Columns {
            index,
            weight,
            lo,
            hi,
        }
    }

    /// Bytes in one padded row.
    fn row_len(&self) -> usize {
        (self.hi - self.lo) as usize * 3
    }
}

/// One destination row's source row `iy` and fraction `ay`, as the general path computes them.
fn row_tap(m: &[f32; 6], y: usize) -> (i64, f32) {
    let row_y = y as f32 * m[4] + m[5];
    let sy = m[3].mul_add(0.0, row_y);
    let fy = sy.floor();
    (fy as i32 as i64, sy - fy)
}

/// Warps `src` by OpenCV's destination-to-source map `m` (which [`is_separable`] accepts) into
/// `dst_w` x `dst_h` RGB bytes, `border` outside the source.
pub(super) fn warp_separable(
    src: &impl WarpSource,
    m: &[f32; 6],
    dst_w: usize,
    dst_h: usize,
    border: u8,
) -> Vec<u8> {
    let (sw, sh) = src.size();
    let mut out = vec![border; dst_w * dst_h * 3];
    if sw == 0 || sh == 0 || dst_w == 0 {
        return out;
    }
    let job = Job {
        src,
        cols: Columns::new(m, sw, dst_w),
        m,
        sh,
        border,
    };
    #[cfg(target_arch = "x86_64")]
    {
        if super::simd::has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above), the features
            // `run_avx2_fma` is compiled for.
            unsafe { job.run_avx2_fma(&mut out) };
            return out;
        }
    }
    job.run(&mut out, horizontal);
    out
}

struct Job<'a, S: WarpSource> {
    src: &'a S,
    cols: Columns,
    m: &'a [f32; 6],
    sh: usize,
    border: u8,
}

impl<S: WarpSource> Job<'_, S> {
    /// The same passes compiled for AVX2 and FMA: the horizontal one through gathers, the
    /// vertical one vectorised by the compiler.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn run_avx2_fma(&self, out: &mut [u8]) {
        let row_len = self.cols.row_len();
        // Every gathered index is checked once here, so the gathers stay in bounds.
        let in_bounds = self
            .cols
            .index
            .iter()
            .all(|&i| i >= 0 && (i as usize) + 3 < row_len);
        if in_bounds {
            // SAFETY: AVX2 and FMA are enabled in this function, and every index (plus 3, the
            // right neighbour) is inside a padded row of `row_len` floats, checked just above.
            self.run(out, |line, index, weight, h| unsafe {
                x86::horizontal(line, index, weight, h)
            });
        } else {
            self.run(out, horizontal);
        }
    }

    /// Destination rows in order, each from the horizontal pass of its two source rows (kept
    /// in two slots, so a source row shared by neighbouring destination rows is made once).
    #[inline(always)]
    fn run(&self, out: &mut [u8], horizontal: impl Fn(&[f32], &[i32], &[f32], &mut [f32])) {
        let row_out = self.cols.index.len();
        let mut line = vec![0u8; self.cols.row_len()];
        let mut line_f = vec![0f32; self.cols.row_len()];
        // Rows outside the source are all border: one key (-1) for all of them.
        let mut slots: [(Option<i64>, Vec<f32>); 2] =
            [(None, vec![0.0; row_out]), (None, vec![0.0; row_out])];
        let key = |r: i64| if r >= 0 && r < self.sh as i64 { r } else { -1 };
        for (y, dst) in out.chunks_exact_mut(row_out).enumerate() {
            let (iy, ay) = row_tap(self.m, y);
            let (k0, k1) = (key(iy), key(iy + 1));
            for (want, keep) in [(k0, k1), (k1, k0)] {
                if slots.iter().any(|s| s.0 == Some(want)) {
                    continue;
                }
                let slot = if slots[0].0 == Some(keep) { 1 } else { 0 };
                self.fill_line(want, &mut line);
                for (f, &b) in line_f.iter_mut().zip(&line) {
                    *f = b as f32;
                }
                horizontal(
                    &line_f,
                    &self.cols.index,
                    &self.cols.weight,
                    &mut slots[slot].1,
                );
                slots[slot].0 = Some(want);
            }
            let find = |k: i64| &slots[usize::from(slots[0].0 != Some(k))].1;
            let (v0, v1) = (find(k0), find(k1));
            for ((d, &a), &b) in dst.iter_mut().zip(v0).zip(v1) {
                *d = round_to_u8(ay.mul_add(b - a, a));
            }
        }
    }

    /// Padded source row `key` (-1: a row outside the source) into `line`.
    fn fill_line(&self, key: i64, line: &mut [u8]) {
        line.fill(self.border);
        if key < 0 {
            return;
        }
        let (sw, _) = self.src.size();
        let (lo, hi) = (self.cols.lo, self.cols.hi);
        // The padded columns that are source columns.
        let (a, b) = (lo.max(PAD), hi.min(sw as i64 + PAD));
        if a < b {
            let at = |p: i64| (p - lo) as usize * 3;
            self.src.read_row(
                key as usize,
                (a - PAD) as usize,
                (b - PAD) as usize,
                &mut line[at(a)..at(b)],
            );
        }
    }
}

/// `v0 = fma(ax, p01 - p00, p00)` for every destination byte, from one padded source row.
#[inline(always)]
fn horizontal(line: &[f32], index: &[i32], weight: &[f32], out: &mut [f32]) {
    for ((o, &i), &w) in out.iter_mut().zip(index).zip(weight) {
        let i = i as usize;
        let (p0, p1) = (line[i], line[i + 3]);
        *o = w.mul_add(p1 - p0, p0);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::horizontal`] eight bytes at a time through gathers.
    ///
    /// # Safety
    /// Every `index[k]` is at least 0 and `index[k] + 3 < line.len()`; `index`, `weight` and
    /// `out` have the same length.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn horizontal(line: &[f32], index: &[i32], weight: &[f32], out: &mut [f32]) {
        let n = out.len().min(index.len()).min(weight.len());
        let whole = n / 8 * 8;
        let three = _mm256_set1_epi32(3);
        for k in (0..whole).step_by(8) {
            // SAFETY: k + 8 <= n, so the loads and the store stay in the slices; the gathered
            // indices are in `line` (the caller's promise).
            unsafe {
                let idx = _mm256_loadu_si256(index.as_ptr().add(k) as *const __m256i);
                let p0 = _mm256_i32gather_ps::<4>(line.as_ptr(), idx);
                let p1 = _mm256_i32gather_ps::<4>(line.as_ptr(), _mm256_add_epi32(idx, three));
                let w = _mm256_loadu_ps(weight.as_ptr().add(k));
                let v = _mm256_fmadd_ps(w, _mm256_sub_ps(p1, p0), p0);
                _mm256_storeu_ps(out.as_mut_ptr().add(k), v);
            }
        }
        super::horizontal(
            line,
            &index[whole..n],
            &weight[whole..n],
            &mut out[whole..n],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::Generator;
    use crate::vision::augment::affine::affine_matrix;
    use crate::vision::augment::draws::AffineDraw;
    use crate::vision::augment::warp::{invert_affine, warp_general};
    use image::{Rgb, RgbImage};

    fn noise(w: u32, h: u32, gen: &mut Generator) -> RgbImage {
        let bytes = gen.integers(0, 256, (w * h * 3) as usize);
        RgbImage::from_fn(w, h, |x, y| {
            let i = ((y * w + x) * 3) as usize;
            Rgb([bytes[i] as u8, bytes[i + 1] as u8, bytes[i + 2] as u8])
        })
    }

    /// Forward maps of scale and translation only: ultralytics' default draws (signed zeros
    /// from its matrix products included), plus mirrored and far-off ones.
    fn separable_maps(gen: &mut Generator, n: usize, sw: usize, sh: usize) -> Vec<[f64; 6]> {
        (0..n)
            .map(|k| {
                let u = gen.uniform(4);
                if k % 2 == 0 {
                    let draw = AffineDraw {
                        scale: 0.3 + 1.7 * u[0],
                        translate: (u[1], u[2]),
                        ..AffineDraw::IDENTITY
                    };
                    let m = affine_matrix(&draw, sw, sh, 128, 96);
                    [0, 1, 2, 3, 4, 5].map(|i| m[i / 3][i % 3] as f64)
                } else {
                    let sx = (0.2 + 2.0 * u[0]) * if u[3] < 0.3 { -1.0 } else { 1.0 };
                    let sy = (0.2 + 2.0 * u[1]) * if u[3] > 0.7 { -1.0 } else { 1.0 };
                    [
                        sx,
                        -0.0,
                        400.0 * u[2] - 200.0,
                        0.0,
                        sy,
                        300.0 * u[3] - 150.0,
                    ]
                }
            })
            .collect()
    }

    #[test]
    fn separable_warp_equals_the_general_warp_bit_for_bit() {
        let mut gen = Generator::new(12);
        let src = noise(203, 157, &mut gen);
        for (k, forward) in separable_maps(&mut gen, 300, 203, 157).iter().enumerate() {
            let inverse = invert_affine(forward).map(|v| v as f32);
            assert!(is_separable(&inverse), "map {k}: {forward:?}");
            let (w, h) = if k % 3 == 0 { (128, 96) } else { (67, 131) };
            let general = warp_general(&src, &inverse, w, h, 114);
            // The dispatched path (AVX2 where the CPU has it) and the portable one.
            let mut portable = vec![0; w * h * 3];
            let job = Job {
                src: &src,
                cols: Columns::new(&inverse, 203, w),
                m: &inverse,
                sh: 157,
                border: 114,
            };
            job.run(&mut portable, horizontal);
            for (name, fast) in [
                ("dispatched", warp_separable(&src, &inverse, w, h, 114)),
                ("portable", portable),
            ] {
                let differ = fast.iter().zip(&general).filter(|(a, b)| a != b).count();
                assert_eq!(
                    differ, 0,
                    "{name}, map {k} {forward:?}: {differ} bytes differ"
                );
            }
        }
    }

    #[test]
    fn rotation_is_not_separable() {
        let draw = AffineDraw {
            degrees: 3.0,
            ..AffineDraw::IDENTITY
        };
        let m = affine_matrix(&draw, 100, 100, 64, 64);
        let forward = [0, 1, 2, 3, 4, 5].map(|i| m[i / 3][i % 3] as f64);
        assert!(!is_separable(&invert_affine(&forward).map(|v| v as f32)));
    }
}
