//! Validation as ultralytics' `model.val()` runs it: rect batches decoded and letterboxed on
//! worker threads, the model on the device, NMS (conf 0.001, IoU 0.7, multi-label, 300 per
//! image), predictions matched against the labels (both in letterboxed pixels) at IoU
//! 0.50:0.95, and AP per class with ultralytics' interpolation. The speed split (pre-process,
//! inference, post-process per image) is measured the way ultralytics' is.

use super::network::YoloModel;
use crate::data::yolo::{DataConfig, ValLoader, ValLoaderOptions, YoloDataset};
use crate::ops::conv::algorithm_search_seconds;
use crate::vision::boxes::{scale_boxes, Box4};
use crate::vision::coco_json;
use crate::vision::metrics::confusion::DetectionsRef;
use crate::vision::metrics::det_metrics::ImageStats;
use crate::vision::metrics::matching::{target_boxes_on_canvas, true_positives};
use crate::vision::metrics::{ConfusionMatrix, DetMetrics, CONFUSION_IOU};
use crate::vision::nms::{non_max_suppression, NmsOptions};
use crate::vision::report::{self, Speed};
use crate::{no_grad, DType, Device, Error, Result};
use std::sync::Arc;
use std::time::Instant;

/// `model.val(...)` settings, with ultralytics' defaults.
#[derive(Clone, Debug)]
pub struct ValOptions {
    pub imgsz: usize,
    pub batch: usize,
    pub conf: f64,
    pub iou: f64,
    pub max_det: usize,
    /// F16 inference (the model and the images), as `half=True`.
    pub half: bool,
    pub rect: bool,
    pub split: String,
    /// Decoding threads (0: one per core, at most 8).
    pub workers: usize,
    /// Keep COCO-style records of every kept box (`ValReport::predictions`), as ultralytics'
    /// `save_json`.
    pub save_json: bool,
}

impl Default for ValOptions {
    fn default() -> Self {
        ValOptions {
            imgsz: 640,
            batch: 32,
            conf: 0.001,
            iou: 0.7,
            max_det: 300,
            half: false,
            rect: true,
            split: "val".into(),
            workers: 0,
            save_json: false,
        }
    }
}

/// What a validation run found.
pub struct ValReport {
    pub metrics: DetMetrics,
    pub confusion: ConfusionMatrix,
    /// Milliseconds per image.
    pub speed: Speed,
    /// Images per second end to end (decoding, model, NMS, metrics), warm-up and cuDNN's
    /// algorithm search excluded.
    pub images_per_second: f64,
    /// Seconds cuDNN spent choosing algorithms for shapes first seen after the warm-up (a
    /// smaller last batch), left out of the timings.
    pub algorithm_search_seconds: f64,
    /// The table ultralytics prints (header, `all`, one row per class).
    pub table: String,
    /// Images dropped or labels repaired while reading the dataset, one line each.
    pub warnings: Vec<String>,
    /// With `save_json`, one COCO-style record per kept box, in original image pixels
    /// (`vision::coco_json`); empty otherwise.
    pub predictions: Vec<serde_json::Value>,
}

impl ValReport {
    /// (mAP50, mAP50-95).
    pub fn maps(&self) -> (f64, f64) {
        let [_, _, map50, map] = self.metrics.mean_results();
        (map50, map)
    }
}

/// Validates `model` (already on `device`) on the `split` of the dataset `data`.
/// `progress(done, total)` is called after each batch.
pub fn validate(
    model: &YoloModel,
    data: &DataConfig,
    opts: &ValOptions,
    device: Device,
    mut progress: impl FnMut(usize, usize),
) -> Result<ValReport> {
    if opts.batch == 0 || opts.imgsz == 0 {
        return Err(Error::invalid(
            "yolo val",
            "batch and imgsz must be positive",
        ));
    }
    let dataset = Arc::new(YoloDataset::load(data, &opts.split)?);
    if dataset.images.is_empty() {
        return Err(Error::invalid(
            "yolo val",
            format!(
                "no usable images in the `{}` split of {}",
                opts.split,
                data.file.display()
            ),
        ));
    }
    // ultralytics validates the fused network (its AutoBackend fuses on load).
    let fused_copy;
    let model = if model.fused {
        model
    } else {
        fused_copy = model.fuse()?;
        &fused_copy
    };
    let stride = model.max_stride();
    // ultralytics rounds imgsz up to a multiple of the stride (check_imgsz).
    let imgsz = opts.imgsz.div_ceil(stride) * stride;
    let loader = ValLoader::new(
        dataset.clone(),
        &ValLoaderOptions {
            batch_size: opts.batch,
            imgsz,
            stride,
            rect: opts.rect,
            workers: opts.workers,
            prefetch: 2,
            ..Default::default()
        },
    )?;
    let total = loader.len();
    let nms = NmsOptions {
        conf_thres: opts.conf,
        iou_thres: opts.iou,
        max_det: opts.max_det,
        ..NmsOptions::validation()
    };
    let dtype = if opts.half { DType::F16 } else { DType::F32 };
    let names = model.names.clone();
    let mut warnings = dataset.warnings.clone();
    warnings.extend(names_differ(&data.names, &names));
    // Labels of classes the model cannot predict are left out, as ultralytics does, with
    // one warning (their classes, how many) after the run.
    let mut skipped = std::collections::BTreeMap::<usize, usize>::new();
    let class_map = match data.split(&opts.split)?.first() {
        Some(list) => coco_json::class_map(list, names.len()),
        None => (1..=names.len()).collect(),
    };
    let mut predictions = Vec::new();
    let mut metrics = DetMetrics::new(names.clone());
    let mut confusion = ConfusionMatrix::new(names.len());
    let (mut pre, mut inf, mut post) = (0f64, 0f64, 0f64);
    let started = Instant::now();
    let run = |x: &crate::Tensor| no_grad(|| model.forward(x));
    let mut warm = false;
    let mut warmup_secs = 0.0;
    let mut search_secs = 0.0;
    // One autocast scope over the whole run, so each weight is cast to F16 once (as
    // ultralytics' `model.half()`), not on every batch.
    let autocast_dtype = opts.half.then_some(DType::F16);
    crate::amp::autocast(autocast_dtype, || -> Result<()> {
        for (done, batch) in loader.enumerate() {
            let batch = batch?;
            // Pre-process, as ultralytics times it: the copy to the device and the scaling (the
            // loader decodes and letterboxes ahead, on its own threads).
            let prepare = || batch.images.to(device, dtype)?.div_scalar(255.0);
            if !warm {
                // A warm-up pass over the first batch (kernel compilation and loading, cuDNN's
                // algorithm search) outside the timings, as ultralytics' `warmup`.
                let tw = Instant::now();
                run(&prepare()?)?;
                device.synchronize()?;
                warmup_secs = tw.elapsed().as_secs_f64();
                warm = true;
            }
            let t0 = Instant::now();
            let x = prepare()?;
            device.synchronize()?;
            let searched_before = algorithm_search_seconds();
            let t1 = Instant::now();
            let pred = run(&x)?;
            device.synchronize()?;
            let t2 = Instant::now();
            let searched = algorithm_search_seconds() - searched_before;
            search_secs += searched;
            let kept = non_max_suppression(&pred, &nms)?;
            for (i, det) in kept.iter().enumerate() {
                // As ultralytics 8.4 does, predictions and targets meet in the letterboxed image's
                // pixels (the labels follow the image through resize and padding).
                let boxes = &det.boxes;
                let labels: Vec<_> = batch.labels[i]
                    .iter()
                    .filter(|l| {
                        let known = l.class < names.len();
                        if !known {
                            *skipped.entry(l.class).or_default() += 1;
                        }
                        known
                    })
                    .collect();
                let target_cls: Vec<usize> = labels.iter().map(|l| l.class).collect();
                let target_xywh: Vec<Box4> = labels.iter().map(|l| l.xywh).collect();
                let targets = target_boxes_on_canvas(&target_xywh, &batch.ratio_pad[i]);
                let tp = true_positives(boxes, &det.classes, &targets, &target_cls);
                if opts.save_json {
                    let mut original = boxes.clone();
                    scale_boxes(&mut original, &batch.ratio_pad[i]);
                    predictions.extend(coco_json::image_records(
                        &batch.paths[i],
                        &original,
                        &det.scores,
                        &det.classes,
                        &class_map,
                    )?);
                }
                confusion.process_batch(
                    DetectionsRef {
                        boxes,
                        conf: &det.scores,
                        classes: &det.classes,
                    },
                    &targets,
                    &target_cls,
                    0.25,
                    CONFUSION_IOU,
                )?;
                metrics.update(ImageStats {
                    tp,
                    conf: det.scores.clone(),
                    pred_cls: det.classes.clone(),
                    target_cls,
                });
            }
            let t3 = Instant::now();
            pre += (t1 - t0).as_secs_f64();
            inf += (t2 - t1).as_secs_f64() - searched;
            post += (t3 - t2).as_secs_f64();
            progress(done + 1, total);
        }
        Ok(())
    })?;
    // End to end (decoding included), without the warm-up pass and the algorithm search.
    let elapsed = started.elapsed().as_secs_f64() - warmup_secs - search_secs;
    metrics.process();
    let seen = metrics.seen.max(1) as f64;
    let speed = Speed {
        preprocess: pre * 1e3 / seen,
        inference: inf * 1e3 / seen,
        loss: 0.0,
        postprocess: post * 1e3 / seen,
    };
    let table = format!(
        "{}\n{}",
        report::header(),
        report::results_table(&metrics, true)
    );
    Ok(ValReport {
        images_per_second: metrics.seen as f64 / elapsed.max(1e-9),
        algorithm_search_seconds: search_secs,
        metrics,
        confusion,
        speed,
        table,
        warnings: warnings
            .into_iter()
            .chain(skipped_labels(&skipped, names.len()))
            .collect(),
        predictions,
    })
}

/// A warning when the dataset names its classes other than the model does (the first few
/// differences), or has a different number of them.
fn names_differ(data: &[String], model: &[String]) -> Option<String> {
    let differ: Vec<String> = data
        .iter()
        .zip(model)
        .enumerate()
        .filter(|(_, (d, m))| d != m)
        .map(|(i, (d, m))| format!("{i}: {d:?} in the dataset, {m:?} in the model"))
        .collect();
    if differ.is_empty() && data.len() == model.len() {
        return None;
    }
    let mut line = format!(
        "the dataset has {} classes and the model {}",
        data.len(),
        model.len()
    );
    if !differ.is_empty() {
        line += &format!(
            "; names differ at {}{}",
            differ[..differ.len().min(3)].join(", "),
            if differ.len() > 3 { ", ..." } else { "" }
        );
    }
    Some(line)
}

/// The warning for labels left out because the model has no such class.
fn skipped_labels(skipped: &std::collections::BTreeMap<usize, usize>, nc: usize) -> Option<String> {
    if skipped.is_empty() {
        return None;
    }
    let total: usize = skipped.values().sum();
    let classes: Vec<String> = skipped.keys().map(usize::to_string).collect();
    Some(format!(
        "skipped {total} labels of classes the model (nc={nc}) cannot predict (classes {})",
        classes.join(", ")
    ))
}
