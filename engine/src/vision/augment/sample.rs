//! The values a training sample passes through: a loaded image with its labels, the
//! intermediate labelled image in pixel corners, and the finished sample.

use crate::vision::boxes::{xywh_to_xyxy, Box4};
use image::RgbImage;

/// A training image as ultralytics' `load_image` leaves it (long side resized to `imgsz`),
/// with its labels normalised to it.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainImage {
    pub image: RgbImage,
    pub classes: Vec<usize>,
    /// Normalised `[cx, cy, w, h]`, one per class.
    pub boxes: Vec<Box4>,
}

/// An image with boxes in pixel corners `[x1, y1, x2, y2]`: what flows between mosaic and
/// affine.
#[derive(Clone, Debug, PartialEq)]
pub struct Labeled {
    pub image: RgbImage,
    pub classes: Vec<usize>,
    pub boxes: Vec<Box4>,
}

/// One finished training sample: the `imgsz` x `imgsz` image and its labels as ultralytics'
/// `Format` hands them to the collate function.
#[derive(Clone, Debug, PartialEq)]
pub struct AugmentedSample {
    pub image: RgbImage,
    pub classes: Vec<usize>,
    /// Normalised `[cx, cy, w, h]`.
    pub boxes: Vec<Box4>,
}

impl TrainImage {
    /// The labels in pixel corners of this image, shifted by (`pad_x`, `pad_y`): ultralytics'
    /// `convert_bbox("xyxy")`, `denormalize(w, h)` and `add_padding`, in f32 in that order.
    pub fn pixel_boxes(&self, pad_x: f32, pad_y: f32) -> Vec<Box4> {
        let (w, h) = (self.image.width() as f32, self.image.height() as f32);
        self.boxes
            .iter()
            .map(|&b| {
                let c = xywh_to_xyxy(b);
                [
                    c[0] * w + pad_x,
                    c[1] * h + pad_y,
                    c[2] * w + pad_x,
                    c[3] * h + pad_y,
                ]
            })
            .collect()
    }

    /// This image on its own, boxes in pixels (the non-mosaic path).
    pub fn to_labeled(&self) -> Labeled {
        Labeled {
            image: self.image.clone(),
            classes: self.classes.clone(),
            boxes: self.pixel_boxes(0.0, 0.0),
        }
    }
}

/// ultralytics' `Instances.clip` of corner boxes to `[0, w] x [0, h]`.
pub fn clip_boxes(boxes: &mut [Box4], w: f32, h: f32) {
    for b in boxes {
        b[0] = b[0].clamp(0.0, w);
        b[1] = b[1].clamp(0.0, h);
        b[2] = b[2].clamp(0.0, w);
        b[3] = b[3].clamp(0.0, h);
    }
}
