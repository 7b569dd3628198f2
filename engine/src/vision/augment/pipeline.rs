//! One training sample through ultralytics' transforms, in `v8_transforms` order: mosaic (or
//! the image alone), random affine into `imgsz` x `imgsz`, HSV, vertical then horizontal flip,
//! and `Format` (centre-size boxes normalised to the image).

use super::affine::random_affine_from;
use super::draws::SampleDraws;
use super::flip::{flip_boxes_lr, flip_boxes_ud, flip_lr, flip_ud};
use super::hsv::apply_hsv;
use super::mosaic::mosaic4_canvas;
use super::sample::{AugmentedSample, Labeled, TrainImage};
use crate::vision::boxes::xyxy_to_xywh;
use crate::{Error, Result};

/// Augments `own` with `draws`. `others` are the images `draws.mosaic` names, in its order
/// (ignored without a mosaic).
pub fn augment(
    own: &TrainImage,
    others: &[&TrainImage],
    draws: &SampleDraws,
    imgsz: usize,
) -> Result<AugmentedSample> {
    // The mosaic's canvas is never built: the warp reads the tiles where they were placed.
    let mut warped = match &draws.mosaic {
        Some(m) => {
            let [a, b, c] = others else {
                return Err(Error::invalid(
                    "augment",
                    format!("a mosaic needs 3 other images, got {}", others.len()),
                ));
            };
            let (canvas, classes, boxes) = mosaic4_canvas([own, a, b, c], imgsz, m)?;
            random_affine_from(&canvas, &classes, &boxes, &draws.affine, imgsz, imgsz)
        }
        None => random_affine_from(
            &own.image,
            &own.classes,
            &own.pixel_boxes(0.0, 0.0),
            &draws.affine,
            imgsz,
            imgsz,
        ),
    };
    apply_hsv(&mut warped.image, draws.hsv_gains);
    Ok(finish(warped, draws.flip_ud, draws.flip_lr))
}

/// The flips and `Format`: corners to centre-size, flipped, normalised by the image size.
pub fn finish(mut sample: Labeled, flip_vertical: bool, flip_horizontal: bool) -> AugmentedSample {
    let (w, h) = (sample.image.width() as f32, sample.image.height() as f32);
    let mut boxes: Vec<_> = sample.boxes.iter().map(|&b| xyxy_to_xywh(b)).collect();
    if flip_vertical {
        flip_ud(&mut sample.image);
        flip_boxes_ud(&mut boxes, h);
    }
    if flip_horizontal {
        flip_lr(&mut sample.image);
        flip_boxes_lr(&mut boxes, w);
    }
    for b in &mut boxes {
        *b = [b[0] / w, b[1] / h, b[2] / w, b[3] / h];
    }
    AugmentedSample {
        image: sample.image,
        classes: sample.classes,
        boxes,
    }
}
