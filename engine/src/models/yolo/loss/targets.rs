//! A batch's labels as the detection loss reads them: ultralytics' `v8DetectionLoss.preprocess`
//! turns rows of (image index, class, normalised x, y, w, h) into one padded block per image,
//! `[B, max_boxes, 5]` of (class, x1, y1, x2, y2) in input pixels, zeros past each image's
//! last box. The block is built on the host, where labels live, and moved in one copy.

use crate::data::yolo::YoloBox;
use crate::{bail, DType, Device, Result, Tensor};

const OP: &str = "DetectionTargets";

/// One labelled object: its image's index in the batch, its class and its box as normalised
/// centre and size (0..1 of the input's width and height).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TargetBox {
    pub image: usize,
    pub class: usize,
    pub xywh: [f64; 4],
}

/// The labels of one batch of `batch_size` images (images may have none).
#[derive(Clone, Debug, PartialEq)]
pub struct DetectionTargets {
    batch_size: usize,
    boxes: Vec<TargetBox>,
}

impl DetectionTargets {
    /// A batch of `batch_size` images with no labels yet.
    pub fn new(batch_size: usize) -> Self {
        DetectionTargets {
            batch_size,
            boxes: Vec::new(),
        }
    }

    /// One image per entry of `labels`, with its boxes (as a data loader gives them).
    pub fn from_labels(labels: &[Vec<YoloBox>]) -> Self {
        let boxes = labels
            .iter()
            .enumerate()
            .flat_map(|(image, ls)| {
                ls.iter().map(move |b| TargetBox {
                    image,
                    class: b.class,
                    xywh: b.xywh.map(f64::from),
                })
            })
            .collect();
        DetectionTargets {
            batch_size: labels.len(),
            boxes,
        }
    }

    /// From ultralytics' target rows `(image index, class, x, y, w, h)`: the index and class
    /// must be whole numbers, the index below `batch_size`.
    pub fn from_rows(batch_size: usize, rows: &[[f64; 6]]) -> Result<Self> {
        let mut t = DetectionTargets::new(batch_size);
        for (i, r) in rows.iter().enumerate() {
            let whole = |v: f64| v >= 0.0 && v.fract() == 0.0 && v < u32::MAX as f64;
            if !whole(r[0]) || !whole(r[1]) {
                bail!(
                    OP,
                    "row {i}: the image index ({}) and class ({}) must be whole numbers >= 0",
                    r[0],
                    r[1]
                );
            }
            t.push(r[0] as usize, r[1] as usize, [r[2], r[3], r[4], r[5]])?;
        }
        Ok(t)
    }

    /// Adds one box to image `image`; the image must be in the batch and the box finite.
    pub fn push(&mut self, image: usize, class: usize, xywh: [f64; 4]) -> Result<()> {
        if image >= self.batch_size {
            bail!(
                OP,
                "image index {image} is outside a batch of {} images",
                self.batch_size
            );
        }
        if xywh.iter().any(|v| !v.is_finite()) {
            bail!(OP, "box {xywh:?} of image {image} is not finite");
        }
        self.boxes.push(TargetBox { image, class, xywh });
        Ok(())
    }

    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    pub fn boxes(&self) -> &[TargetBox] {
        &self.boxes
    }

    /// The most boxes any one image has: the padded block's second dim.
    pub fn max_per_image(&self) -> usize {
        let mut counts = vec![0usize; self.batch_size];
        for b in &self.boxes {
            counts[b.image] += 1;
        }
        counts.into_iter().max().unwrap_or(0)
    }

    /// `[B, max_per_image, 5]` of (class, x1, y1, x2, y2), boxes scaled to an input of
    /// `(height, width)` pixels; each image's boxes in the order they were added, then zero
    /// rows. Computed in f64 and stored in `dtype` on `device`.
    pub fn padded(&self, input_hw: (usize, usize), dtype: DType, device: Device) -> Result<Tensor> {
        let m = self.max_per_image();
        let mut out = vec![0f64; self.batch_size * m * 5];
        let mut filled = vec![0usize; self.batch_size];
        let (h, w) = (input_hw.0 as f64, input_hw.1 as f64);
        for b in &self.boxes {
            let row = (b.image * m + filled[b.image]) * 5;
            filled[b.image] += 1;
            // The centre and size in pixels first, then the corners, in preprocess' order.
            let [x, y, bw, bh] = [b.xywh[0] * w, b.xywh[1] * h, b.xywh[2] * w, b.xywh[3] * h];
            let (hw, hh) = (bw / 2.0, bh / 2.0);
            out[row..row + 5].copy_from_slice(&[b.class as f64, x - hw, y - hh, x + hw, y + hh]);
        }
        Tensor::from_vec(out, &[self.batch_size, m, 5])?.to(device, dtype)
    }
}
