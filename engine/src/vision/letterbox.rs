//! ultralytics' validation preprocessing (8.4.190), step by step:
//!
//! 1. `BaseDataset.load_image` resizes every image so its long side is `imgsz` (up or down;
//!    skipped only when the long side already is `imgsz`): `r = imgsz / max(h0, w0)`, each side
//!    `min(ceil(side * r), imgsz)`, with `cv2.INTER_LINEAR` ([`resize_linear`]).
//! 2. `LetterBox(scaleup=False)` fits that into the batch shape (the rect batch's shape, or
//!    `imgsz` x `imgsz`): `r = min(1, new_h / h, new_w / w)`, each side `max(round(side * r), 1)`
//!    (Python's half-to-even `round`), then the padding split as `round(d / 2 - 0.1)` before and
//!    `round(d / 2 + 0.1)` after, filled with grey 114.
//! 3. The validator maps predictions back with `ratio_pad = ((gain_h, gain_w), (pad_left,
//!    pad_top))`, both gains being step 1's ratio times step 2's ([`super::boxes::scale_boxes`]).
//!
//! Rect batches (`set_rectangle`, which `model.val()` turns on) are in `super::rect` .

use super::resize::resize_linear;
use image::{Rgb, RgbImage};

/// The grey ultralytics pads with.
pub const PAD_VALUE: u8 = 114;

/// Step 1: the (width, height) `load_image` resizes a `w0` x `h0` image to for `imgsz`.
pub fn load_size(w0: usize, h0: usize, imgsz: usize) -> (usize, usize) {
    let r = imgsz as f64 / w0.max(h0) as f64;
    if r == 1.0 {
        return (w0, h0);
    }
    let side = |s: usize| ((s as f64 * r).ceil() as usize).min(imgsz);
    (side(w0), side(h0))
}

/// Step 2's geometry: where an image of (h, w) lands in a canvas of `new_shape` (h, w).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Letterbox {
    /// The scale applied (the same on both axes).
    pub ratio: f64,
    /// The resized image's (width, height) inside the canvas.
    pub unpadded: (usize, usize),
    pub top: usize,
    pub bottom: usize,
    pub left: usize,
    pub right: usize,
}

impl Letterbox {
    /// `LetterBox.get_params` with `auto=False`, `scale_fill=False`, `center=True`.
    pub fn new(shape_hw: (usize, usize), new_shape_hw: (usize, usize), scaleup: bool) -> Self {
        let (h, w) = (shape_hw.0 as f64, shape_hw.1 as f64);
        let (nh, nw) = new_shape_hw;
        let mut ratio = (nh as f64 / h).min(nw as f64 / w);
        if !scaleup {
            ratio = ratio.min(1.0);
        }
        let side = |s: f64| ((s * ratio).round_ties_even() as usize).max(1);
        let unpadded = (side(w), side(h));
        let dw = nw.saturating_sub(unpadded.0) as f64 / 2.0;
        let dh = nh.saturating_sub(unpadded.1) as f64 / 2.0;
        let round = |v: f64| v.round_ties_even().max(0.0) as usize;
        Letterbox {
            ratio,
            unpadded,
            top: round(dh - 0.1),
            bottom: round(dh + 0.1),
            left: round(dw - 0.1),
            right: round(dw + 0.1),
        }
    }

    /// Resizes (when the size changes) and pads `img` into the canvas.
    pub fn apply(&self, img: &RgbImage) -> RgbImage {
        let (uw, uh) = self.unpadded;
        let resized;
        let inner = if (img.width() as usize, img.height() as usize) == (uw, uh) {
            img
        } else {
            resized = resize_linear(img, uw, uh);
            &resized
        };
        let cw = (uw + self.left + self.right) as u32;
        let ch = (uh + self.top + self.bottom) as u32;
        let mut canvas = RgbImage::from_pixel(cw, ch, Rgb([PAD_VALUE; 3]));
        image::imageops::replace(&mut canvas, inner, self.left as i64, self.top as i64);
        canvas
    }
}

/// How predictions on a preprocessed image map back to the original: ultralytics'
/// `ratio_pad`, `((gain_h, gain_w), (pad_left, pad_top))`, plus the original (h, w).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioPad {
    pub gain_hw: (f64, f64),
    pub pad_xy: (f64, f64),
    pub orig_hw: (usize, usize),
}

/// Steps 1 and 2 on one image: resize the long side to `imgsz`, then letterbox (without
/// scaling up) into `canvas_hw`, or `imgsz` x `imgsz` when `None`.
pub fn preprocess_val(
    img: &RgbImage,
    imgsz: usize,
    canvas_hw: Option<(usize, usize)>,
) -> (RgbImage, RatioPad) {
    let (w0, h0) = (img.width() as usize, img.height() as usize);
    let (w1, h1) = load_size(w0, h0, imgsz);
    let loaded_owned;
    let loaded = if (w1, h1) == (w0, h0) {
        img
    } else {
        loaded_owned = resize_linear(img, w1, h1);
        &loaded_owned
    };
    let lb = Letterbox::new((h1, w1), canvas_hw.unwrap_or((imgsz, imgsz)), false);
    let out = lb.apply(loaded);
    let ratio_pad = RatioPad {
        gain_hw: (
            h1 as f64 / h0 as f64 * lb.ratio,
            w1 as f64 / w0 as f64 * lb.ratio,
        ),
        pad_xy: (lb.left as f64, lb.top as f64),
        orig_hw: (h0, w0),
    };
    (out, ratio_pad)
}
