//! ultralytics' `RandomPerspective` with `perspective = 0` (8.4.190): one affine warp into the
//! `imgsz` x `imgsz` training image, its boxes moved the same way, and `box_candidates`
//! dropping the boxes the warp shrank or squashed too much.
//!
//! The matrix is `T @ S @ R @ C` in f32 (numpy's float32 3x3 matrices): `C` moves the input's
//! centre to the origin, `R` rotates and scales (`cv2.getRotationMatrix2D` about the origin,
//! computed in f64 and stored as f32), `S` shears, `T` moves the origin to `translate * size`.
//! After a mosaic the input is the `2 * imgsz` canvas, so the warp both crops and rescales it;
//! without one, it places the single loaded image (ultralytics has no separate letterbox on
//! this path). Boxes: the four corners of each box go through the matrix (f32), the result is
//! their bounding box, clipped to the output.

use super::draws::AffineDraw;
use super::mosaic::filter;
use super::sample::{clip_boxes, Labeled};
use super::warp::warp_affine_from;
use super::warp_source::WarpSource;
use crate::vision::boxes::Box4;
use crate::vision::letterbox::PAD_VALUE;

/// A 3x3 matrix in f32, row-major.
pub type Mat3 = [[f32; 3]; 3];

/// The thresholds of `box_candidates` (ultralytics' defaults for detection).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CandidateRule {
    /// A box narrower or shorter than this (pixels) is dropped.
    pub wh_thr: f32,
    /// A box whose aspect ratio (either way) reaches this is dropped.
    pub ar_thr: f32,
    /// A box whose area fell below this fraction of its area before the warp (times the
    /// scale squared) is dropped.
    pub area_thr: f32,
    pub eps: f32,
}

impl Default for CandidateRule {
    fn default() -> Self {
        CandidateRule {
            wh_thr: 2.0,
            ar_thr: 100.0,
            area_thr: 0.1,
            eps: 1e-16,
        }
    }
}

/// The forward affine matrix for an input of `src_w` x `src_h` and an output of `out_w` x
/// `out_h`.
pub fn affine_matrix(
    draw: &AffineDraw,
    src_w: usize,
    src_h: usize,
    out_w: usize,
    out_h: usize,
) -> Mat3 {
    let mut c = identity();
    c[0][2] = (-(src_w as f64) / 2.0) as f32;
    c[1][2] = (-(src_h as f64) / 2.0) as f32;
    let angle = draw.degrees.to_radians();
    let (alpha, beta) = (angle.cos() * draw.scale, angle.sin() * draw.scale);
    let r = [
        [alpha as f32, beta as f32, 0.0],
        [-beta as f32, alpha as f32, 0.0],
        [0.0, 0.0, 1.0],
    ];
    let mut s = identity();
    s[0][1] = (draw.shear.0 * std::f64::consts::PI / 180.0).tan() as f32;
    s[1][0] = (draw.shear.1 * std::f64::consts::PI / 180.0).tan() as f32;
    let mut t = identity();
    t[0][2] = (draw.translate.0 * out_w as f64) as f32;
    t[1][2] = (draw.translate.1 * out_h as f64) as f32;
    // numpy evaluates `T @ S @ R @ P @ C` left to right; P is the identity here.
    matmul(&matmul(&matmul(&t, &s), &r), &c)
}

/// Warps `input` into `out_w` x `out_h` with `draw`, moving its boxes and keeping those
/// `box_candidates` accepts.
pub fn random_affine(input: &Labeled, draw: &AffineDraw, out_w: usize, out_h: usize) -> Labeled {
    random_affine_from(
        &input.image,
        &input.classes,
        &input.boxes,
        draw,
        out_w,
        out_h,
    )
}

/// [`random_affine`] of any [`WarpSource`] (a mosaic's unbuilt canvas, say) with its classes
/// and corner boxes.
pub fn random_affine_from(
    image: &impl WarpSource,
    classes: &[usize],
    boxes: &[Box4],
    draw: &AffineDraw,
    out_w: usize,
    out_h: usize,
) -> Labeled {
    let (src_w, src_h) = image.size();
    let m = affine_matrix(draw, src_w, src_h, out_w, out_h);
    let forward = [0, 1].map(|i| m[i].map(f64::from));
    let forward = [
        forward[0][0],
        forward[0][1],
        forward[0][2],
        forward[1][0],
        forward[1][1],
        forward[1][2],
    ];
    let image = warp_affine_from(image, &forward, out_w, out_h, PAD_VALUE);
    let mut moved = transform_boxes(boxes, &m);
    clip_boxes(&mut moved, out_w as f32, out_h as f32);
    // The boxes before the warp, scaled as the warp scaled them (`instances.scale`).
    let scale = draw.scale as f32;
    let before: Vec<Box4> = boxes.iter().map(|b| b.map(|v| v * scale)).collect();
    let keep = box_candidates(&before, &moved, &CandidateRule::default());
    Labeled {
        image,
        classes: filter(classes, &keep),
        boxes: filter(&moved, &keep),
    }
}

/// Each corner box's four corners through `m` (affine rows only), and their bounding box.
pub fn transform_boxes(boxes: &[Box4], m: &Mat3) -> Vec<Box4> {
    boxes
        .iter()
        .map(|b| {
            let corners = [(b[0], b[1]), (b[2], b[3]), (b[0], b[3]), (b[2], b[1])];
            let mapped = corners.map(|(x, y)| {
                (
                    x * m[0][0] + y * m[0][1] + m[0][2],
                    x * m[1][0] + y * m[1][1] + m[1][2],
                )
            });
            let xs = mapped.map(|p| p.0);
            let ys = mapped.map(|p| p.1);
            let min = |v: [f32; 4]| v.into_iter().fold(f32::INFINITY, f32::min);
            let max = |v: [f32; 4]| v.into_iter().fold(f32::NEG_INFINITY, f32::max);
            [min(xs), min(ys), max(xs), max(ys)]
        })
        .collect()
}

/// ultralytics' `box_candidates`: which warped boxes (`after`) to keep, compared with the same
/// boxes before the warp (`before`, already scaled), all in corners.
pub fn box_candidates(before: &[Box4], after: &[Box4], rule: &CandidateRule) -> Vec<bool> {
    before
        .iter()
        .zip(after)
        .map(|(b1, b2)| {
            let (w1, h1) = (b1[2] - b1[0], b1[3] - b1[1]);
            let (w2, h2) = (b2[2] - b2[0], b2[3] - b2[1]);
            let ar = (w2 / (h2 + rule.eps)).max(h2 / (w2 + rule.eps));
            w2 > rule.wh_thr
                && h2 > rule.wh_thr
                && w2 * h2 / (w1 * h1 + rule.eps) > rule.area_thr
                && ar < rule.ar_thr
        })
        .collect()
}

fn identity() -> Mat3 {
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
}

fn matmul(a: &Mat3, b: &Mat3) -> Mat3 {
    std::array::from_fn(|i| {
        std::array::from_fn(|j| a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_centres_scales_and_translates() {
        let draw = AffineDraw {
            scale: 0.75,
            translate: (0.6, 0.45),
            ..AffineDraw::IDENTITY
        };
        let m = affine_matrix(&draw, 128, 100, 64, 64);
        // The input centre (64, 50) lands at (0.6 * 64, 0.45 * 64); one pixel right moves 0.75.
        let at = |x: f32, y: f32| {
            (
                x * m[0][0] + y * m[0][1] + m[0][2],
                x * m[1][0] + y * m[1][1] + m[1][2],
            )
        };
        let (x, y) = at(64.0, 50.0);
        assert!(
            (x - 38.4).abs() < 1e-5 && (y - 28.8).abs() < 1e-5,
            "({x}, {y})"
        );
        assert!((at(65.0, 50.0).0 - x - 0.75).abs() < 1e-5);
        assert_eq!(m[2], [0.0, 0.0, 1.0]);
    }

    #[test]
    fn rotation_follows_get_rotation_matrix_2d() {
        // cv2.getRotationMatrix2D(90, (0, 0), 1) is [[0, 1, 0], [-1, 0, 0]]: +x goes to -y.
        let draw = AffineDraw {
            degrees: 90.0,
            translate: (0.0, 0.0),
            ..AffineDraw::IDENTITY
        };
        let m = affine_matrix(&draw, 0, 0, 10, 10);
        assert!((m[0][0]).abs() < 1e-7 && m[0][1] == 1.0 && m[1][0] == -1.0);
    }

    #[test]
    fn boxes_take_the_bounds_of_their_rotated_corners() {
        let draw = AffineDraw {
            degrees: 90.0,
            translate: (0.0, 0.0),
            ..AffineDraw::IDENTITY
        };
        let m = affine_matrix(&draw, 0, 0, 10, 10);
        let out = transform_boxes(&[[1.0, 2.0, 5.0, 3.0]], &m);
        // (x, y) -> (y, -x): x spans 2..3, y spans -5..-1.
        let b = out[0].map(|v| v.round());
        assert_eq!(b, [2.0, -5.0, 3.0, -1.0]);
    }

    #[test]
    fn box_candidates_apply_each_threshold() {
        let rule = CandidateRule::default();
        let before = [[0.0, 0.0, 10.0, 10.0]; 5];
        let after = [
            [0.0, 0.0, 10.0, 10.0], // kept
            [0.0, 0.0, 2.0, 10.0],  // width 2 is not above 2
            [0.0, 0.0, 3.0, 3.0],   // area 9 of 100: below 0.1
            [0.0, 0.0, 4.0, 4.0],   // area 16 of 100: kept
            [0.0, 0.0, 300.0, 2.5], // aspect 120
        ];
        assert_eq!(
            box_candidates(&before, &after, &rule),
            [true, false, false, true, false]
        );
    }

    #[test]
    fn a_box_warped_off_the_image_is_dropped() {
        let input = Labeled {
            image: image::RgbImage::new(64, 64),
            classes: vec![7, 8],
            boxes: vec![[10.0, 10.0, 30.0, 30.0], [0.0, 0.0, 6.0, 6.0]],
        };
        // Scale 1, the input centre (32, 32) moved to (6.4, 32): x shifts by -25.6.
        let draw = AffineDraw {
            translate: (0.1, 0.5),
            ..AffineDraw::IDENTITY
        };
        let out = random_affine(&input, &draw, 64, 64);
        // The first box spans -15.6..4.4, clipped to 0..4.4 (0.22 of its area: kept); the
        // second, -25.6..-19.6, clips to nothing.
        assert_eq!(out.classes, vec![7]);
        let b = out.boxes[0];
        assert!(b[0] == 0.0 && (b[2] - 4.4).abs() < 1e-5 && b[1] == 10.0 && b[3] == 30.0);
    }
}
