//! Axis-aligned box arithmetic in ultralytics' conventions, on plain `[f32; 4]` boxes.
//!
//! Every formula keeps the operation order of the PyTorch code it mirrors (ultralytics 8.4.190
//! `utils/ops.py` and `utils/metrics.py::box_iou`) and computes in f32, so results are bit-equal
//! to what PyTorch produces on the CPU. A Python float scalar applied to an f32 tensor (the IoU
//! `eps`, a padding or a gain) is rounded to f32 first, as PyTorch does.

/// A box as `[x1, y1, x2, y2]` (corners) or `[cx, cy, w, h]` (center and size).
pub type Box4 = [f32; 4];

/// The `eps` that ultralytics' `box_iou` adds to the union (a Python `1e-7`, applied in f32).
pub const BOX_IOU_EPS: f32 = 1e-7;

/// `[cx, cy, w, h]` to `[x1, y1, x2, y2]`: the center minus and plus half the size.
pub fn xywh_to_xyxy(b: Box4) -> Box4 {
    let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
    [b[0] - hw, b[1] - hh, b[0] + hw, b[1] + hh]
}

/// `[x1, y1, x2, y2]` to `[cx, cy, w, h]`.
pub fn xyxy_to_xywh(b: Box4) -> Box4 {
    [
        (b[0] + b[2]) / 2.0,
        (b[1] + b[3]) / 2.0,
        b[2] - b[0],
        b[3] - b[1],
    ]
}

/// IoU of two corner boxes as ultralytics' `box_iou` computes it:
/// `inter / (area_a + area_b - inter + eps)`, with the overlap clamped at zero.
pub fn box_iou_pair(a: &Box4, b: &Box4, eps: f32) -> f32 {
    let w = clamp_min_zero(a[2].min(b[2]) - a[0].max(b[0]));
    let h = clamp_min_zero(a[3].min(b[3]) - a[1].max(b[1]));
    let inter = w * h;
    let area_a = (a[2] - a[0]) * (a[3] - a[1]);
    let area_b = (b[2] - b[0]) * (b[3] - b[1]);
    inter / (area_a + area_b - inter + eps)
}

/// The `[a.len(), b.len()]` IoU matrix, row-major (`iou[i * b.len() + j]` pairs `a[i]` with
/// `b[j]`), with ultralytics' `eps` of 1e-7.
pub fn box_iou(a: &[Box4], b: &[Box4]) -> Vec<f32> {
    let mut out = Vec::with_capacity(a.len() * b.len());
    for ra in a {
        out.extend(b.iter().map(|rb| box_iou_pair(ra, rb, BOX_IOU_EPS)));
    }
    out
}

/// Clamps x to `[0, width]` and y to `[0, height]` (torch's `clamp_`, which keeps NaN).
pub fn clip_box(b: Box4, height: f32, width: f32) -> Box4 {
    [
        torch_clamp(b[0], 0.0, width),
        torch_clamp(b[1], 0.0, height),
        torch_clamp(b[2], 0.0, width),
        torch_clamp(b[3], 0.0, height),
    ]
}

pub use super::letterbox::RatioPad;

impl RatioPad {
    /// The letterbox geometry ultralytics infers when no `ratio_pad` is given: one gain for
    /// both axes, each side rounded (at least 1 pixel), and the padding centered with the
    /// `- 0.1` bias of its `LetterBox`. Shapes are `(height, width)`.
    pub fn from_shapes(letterboxed: (usize, usize), original: (usize, usize)) -> RatioPad {
        let (h1, w1) = (letterboxed.0 as f64, letterboxed.1 as f64);
        let (h0, w0) = (original.0 as f64, original.1 as f64);
        let gain = (h1 / h0).min(w1 / w0);
        let new_h = round_half_even(h0 * gain).max(1.0);
        let new_w = round_half_even(w0 * gain).max(1.0);
        RatioPad {
            gain_hw: (new_h / h0, new_w / w0),
            pad_xy: (
                round_half_even((w1 - new_w) / 2.0 - 0.1),
                round_half_even((h1 - new_h) / 2.0 - 0.1),
            ),
            orig_hw: original,
        }
    }
}

/// Maps corner boxes from the letterboxed image back to the original image (ultralytics'
/// `scale_boxes` with `padding=True`, `xywh=False`): subtract the padding, divide by the gain,
/// clip to the original `(height, width)` that `ratio_pad` carries. The gains and pads are Python floats applied to an
/// f32 tensor, so they are rounded to f32 before the arithmetic.
pub fn scale_boxes(boxes: &mut [Box4], ratio_pad: &RatioPad) {
    let (pad_w, pad_h) = (ratio_pad.pad_xy.0 as f32, ratio_pad.pad_xy.1 as f32);
    let (gain_h, gain_w) = (ratio_pad.gain_hw.0 as f32, ratio_pad.gain_hw.1 as f32);
    let (h, w) = (ratio_pad.orig_hw.0 as f32, ratio_pad.orig_hw.1 as f32);
    for b in boxes.iter_mut() {
        let scaled = [
            (b[0] - pad_w) / gain_w,
            (b[1] - pad_h) / gain_h,
            (b[2] - pad_w) / gain_w,
            (b[3] - pad_h) / gain_h,
        ];
        *b = clip_box(scaled, h, w);
    }
}

/// `max(v, 0)` as `clamp_(0)` computes it: NaN stays NaN.
fn clamp_min_zero(v: f32) -> f32 {
    if v < 0.0 {
        0.0
    } else {
        v
    }
}

/// torch's `clamp(lo, hi)`: NaN stays NaN.
fn torch_clamp(v: f32, lo: f32, hi: f32) -> f32 {
    if v < lo {
        lo
    } else if v > hi {
        hi
    } else {
        v
    }
}

/// Python's `round` on a float: halves go to the even neighbour.
fn round_half_even(v: f64) -> f64 {
    v.round_ties_even()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xywh_and_xyxy_convert_both_ways() {
        let c = [10.0, 20.0, 4.0, 6.0];
        assert_eq!(xywh_to_xyxy(c), [8.0, 17.0, 12.0, 23.0]);
        assert_eq!(xyxy_to_xywh([8.0, 17.0, 12.0, 23.0]), c);
    }

    #[test]
    fn box_iou_adds_eps_to_the_union() {
        // Two unit-area boxes overlapping by half: inter 0.5, union 1.5 (+1e-7 in f32).
        let a = [0.0, 0.0, 1.0, 1.0];
        let b = [0.5, 0.0, 1.5, 1.0];
        let expected = 0.5f32 / (1.0f32 + 1.0 - 0.5 + 1e-7f32);
        assert_eq!(
            box_iou_pair(&a, &b, BOX_IOU_EPS).to_bits(),
            expected.to_bits()
        );
        let m = box_iou(&[a, b], &[b]);
        assert_eq!(m.len(), 2);
        // A box with itself: inter 1, union 1 + eps, just under 1.
        assert_eq!(m[1], 1.0 / (1.0 + 1e-7f32));
        assert!(m[1] < 1.0);
        // Disjoint boxes: zero overlap, not a negative one.
        assert_eq!(box_iou_pair(&a, &[3.0, 3.0, 4.0, 4.0], BOX_IOU_EPS), 0.0);
    }

    #[test]
    fn clip_box_clamps_each_axis_to_its_own_side() {
        assert_eq!(
            clip_box([-1.0, -2.0, 50.0, 50.0], 40.0, 30.0),
            [0.0, 0.0, 30.0, 40.0]
        );
        assert!(clip_box([f32::NAN, 0.0, 1.0, 1.0], 4.0, 4.0)[0].is_nan());
    }

    #[test]
    fn ratio_pad_from_shapes_matches_the_letterbox_geometry() {
        // A 480x640 image letterboxed to 640x640: gain 1, 80 pixels of padding top and bottom.
        let rp = RatioPad::from_shapes((640, 640), (480, 640));
        assert_eq!(rp.gain_hw, (1.0, 1.0));
        assert_eq!(rp.pad_xy, (0.0, 80.0));
        // 333x500 to 640: gain 1.28, new side 426.24 -> 426, pad (640-426)/2 - 0.1 = 106.9 -> 107.
        let rp = RatioPad::from_shapes((640, 640), (333, 500));
        assert_eq!(rp.gain_hw.0, 426.0 / 333.0);
        assert_eq!(rp.pad_xy.1, 107.0);
    }

    #[test]
    fn scale_boxes_removes_padding_divides_by_gain_and_clips() {
        let rp = RatioPad {
            gain_hw: (0.5, 0.5),
            pad_xy: (0.0, 80.0),
            orig_hw: (960, 1280),
        };
        let mut b = [[10.0, 90.0, 20.0, 100.0], [-4.0, 70.0, 700.0, 600.0]];
        scale_boxes(&mut b, &rp);
        assert_eq!(b[0], [20.0, 20.0, 40.0, 40.0]);
        assert_eq!(b[1], [0.0, 0.0, 1280.0, 960.0]);
    }
}
