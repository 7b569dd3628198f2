//! A detection split as a `BatchSource`: letterboxed images in [0, 1] and their boxes in the
//! layout of ultralytics' training batches, decoded on the loader's worker threads.

use super::labels::{YoloBox, YoloDataset};
use super::loader::{ValLoader, ValLoaderOptions, YoloBatch};
use crate::data::batch_source::{Batch, BatchSource, Epoch};
use crate::vision::RatioPad;
use crate::{DType, Device, Error, Generator, Result, Tensor};
use std::sync::Arc;

/// A split's images with the loader's options and, when shuffling, the generator each
/// epoch's order comes from.
pub struct ImageBatches {
    dataset: Arc<YoloDataset>,
    options: ValLoaderOptions,
    shuffle: Option<Generator>,
}

impl ImageBatches {
    /// Shuffled epochs (`shuffle`) serve square `imgsz` canvases, so they exclude `rect`.
    pub fn new(
        dataset: Arc<YoloDataset>,
        options: ValLoaderOptions,
        shuffle: Option<Generator>,
    ) -> Result<Self> {
        if shuffle.is_some() && options.rect {
            return Err(Error::invalid(
                "loader",
                "shuffle and rect cannot be combined (rect batches follow the aspect ratios)",
            ));
        }
        if options.batch_size == 0 || options.imgsz == 0 {
            return Err(Error::invalid(
                "loader",
                "batch_size and imgsz must be at least 1",
            ));
        }
        Ok(ImageBatches {
            dataset,
            options,
            shuffle,
        })
    }
}

impl BatchSource for ImageBatches {
    fn num_batches(&self) -> usize {
        let (n, b) = (self.dataset.images.len(), self.options.batch_size);
        if self.options.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        }
    }

    /// Worker threads start decoding now, a few batches ahead of the consumer.
    fn epoch(&mut self, device: Device) -> Result<Epoch> {
        let mut options = self.options.clone();
        if let Some(g) = &mut self.shuffle {
            options.order = Some(g.permutation(self.dataset.images.len()));
        }
        let loader = ValLoader::new(self.dataset.clone(), &options)?;
        Ok(Box::new(loader.map(move |b| training_batch(b?, device))))
    }
}

/// Images as F32 in [0, 1] (converted on `device`, after the U8 upload) and boxes as
/// `[n, 6]` rows on it.
fn training_batch(b: YoloBatch, device: Device) -> Result<Batch> {
    let dims = b.images.dims().to_vec();
    let rows = canvas_labels(&b.labels, &b.ratio_pad, (dims[2], dims[3]));
    let n = rows.len() / 6;
    let x = b
        .images
        .to_device(device)?
        .to(device, DType::F32)?
        .mul_scalar(1.0 / 255.0)?;
    let y = Tensor::from_vec(rows, &[n, 6])?.to_device(device)?;
    Ok(Batch {
        x,
        y,
        paths: b.paths,
    })
}

/// Boxes normalised to each original image, as `[n, 6]` rows of (image in batch, class, cx,
/// cy, w, h) normalised to the letterboxed canvas `(h, w)` the image was placed on, the layout
/// of ultralytics' training batches.
pub fn canvas_labels(
    labels: &[Vec<YoloBox>],
    placement: &[RatioPad],
    canvas_hw: (usize, usize),
) -> Vec<f32> {
    let (ch, cw) = (canvas_hw.0 as f64, canvas_hw.1 as f64);
    let mut rows = Vec::new();
    for (k, (boxes, rp)) in labels.iter().zip(placement).enumerate() {
        let (h0, w0) = (rp.orig_hw.0 as f64, rp.orig_hw.1 as f64);
        let (gy, gx) = rp.gain_hw;
        let (px, py) = rp.pad_xy;
        for b in boxes {
            let [cx, cy, w, h] = b.xywh.map(f64::from);
            rows.extend(
                [
                    k as f64,
                    b.class as f64,
                    (cx * w0 * gx + px) / cw,
                    (cy * h0 * gy + py) / ch,
                    w * w0 * gx / cw,
                    h * h0 * gy / ch,
                ]
                .map(|v| v as f32),
            );
        }
    }
    rows
}
