//! The validation losses of results.csv (`val/box_loss`, ...): ultralytics' validator, when a
//! trainer runs it, adds the loss items of every validation batch (the unfused EMA in eval
//! mode, on the rect batches, labels in the letterboxed image) and divides by the number of
//! batches. The validator here runs the fused network, which has no raw head output to take
//! the loss of, so this is one more pass of the unfused EMA over the same batches; the sums
//! stay on the device until the end.

use crate::data::yolo::{DataConfig, ValLoader, ValLoaderOptions, YoloBatch, YoloDataset};
use crate::models::yolo::loss::{DetectionLoss, DetectionTargets};
use crate::models::yolo::YoloModel;
use crate::vision::metrics::matching::target_boxes_on_canvas;
use crate::{no_grad, DType, Device, Error, Result, Tensor};
use std::sync::Arc;

/// What the pass reads: the dataset, the validation size and batching, and the device.
pub(super) struct ValLossInputs<'a> {
    pub data: &'a DataConfig,
    pub imgsz: usize,
    pub batch: usize,
    pub workers: usize,
    pub device: Device,
}

/// Mean box, cls and dfl loss items over the `val` split's batches.
pub(super) fn validation_losses(
    model: &YoloModel,
    loss: &DetectionLoss,
    inputs: &ValLossInputs,
) -> Result<[f64; 3]> {
    let dataset = Arc::new(YoloDataset::load(inputs.data, "val")?);
    let loader = ValLoader::new(
        dataset,
        &ValLoaderOptions {
            batch_size: inputs.batch,
            imgsz: inputs.imgsz,
            stride: model.max_stride(),
            rect: true,
            workers: inputs.workers,
            prefetch: 2,
            ..ValLoaderOptions::default()
        },
    )?;
    let mut sum: Option<Tensor> = None;
    let mut batches = 0usize;
    no_grad(|| {
        for batch in loader {
            crate::cancel::check()?;
            let batch = batch?;
            let x = batch
                .images
                .to(inputs.device, DType::F32)?
                .div_scalar(255.0)?;
            let (h, w) = (x.dims()[2], x.dims()[3]);
            let head = model.forward_head(&x)?;
            let items = loss
                .forward_head(&head, &canvas_targets(&batch, h, w)?)?
                .items;
            sum = Some(match sum.take() {
                Some(s) => s.add(&items)?,
                None => items,
            });
            batches += 1;
        }
        Ok::<(), Error>(())
    })?;
    let sum = sum.ok_or_else(|| Error::invalid("yolo val loss", "no validation batches"))?;
    let v = sum
        .to_device(Device::Cpu)?
        .to_dtype(DType::F64)?
        .to_vec::<f64>()?;
    let n = batches as f64;
    Ok([v[0] / n, v[1] / n, v[2] / n])
}

/// Each image's labels as normalised centre-size boxes of the `h` x `w` letterboxed input.
fn canvas_targets(batch: &YoloBatch, h: usize, w: usize) -> Result<DetectionTargets> {
    let mut targets = DetectionTargets::new(batch.labels.len());
    for (i, labels) in batch.labels.iter().enumerate() {
        let xywh: Vec<[f32; 4]> = labels.iter().map(|l| l.xywh).collect();
        let corners = target_boxes_on_canvas(&xywh, &batch.ratio_pad[i]);
        for (label, c) in labels.iter().zip(corners) {
            let (x1, y1, x2, y2) = (c[0] as f64, c[1] as f64, c[2] as f64, c[3] as f64);
            let (w, h) = (w as f64, h as f64);
            let xywh = [
                (x1 + x2) / 2.0 / w,
                (y1 + y2) / 2.0 / h,
                (x2 - x1) / w,
                (y2 - y1) / h,
            ];
            targets.push(i, label.class, xywh)?;
        }
    }
    Ok(targets)
}
