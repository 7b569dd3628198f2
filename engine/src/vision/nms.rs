//! Non-maximum suppression of a YOLO detection head's raw output, with the semantics of
//! ultralytics 8.4.190 `utils/nms.py::non_max_suppression` followed by torchvision's CPU
//! `nms` kernel (the path the validator takes: its warm-up imports torchvision).
//!
//! Per image: an anchor is a candidate when its largest class score exceeds `conf_thres`; its
//! `[cx, cy, w, h]` becomes corners; with `multi_label` every class whose score exceeds the
//! threshold gives a row (rows ordered by anchor, then class), otherwise the best class does;
//! the optional class filter drops rows; more than `max_nms` rows keep the `max_nms` highest
//! scores; boxes are shifted by `class * max_wh` (unless agnostic) so that classes never
//! overlap; greedy suppression keeps rows in descending score order and drops every later row
//! whose IoU with a kept one exceeds `iou_thres`; the first `max_det` kept rows are returned.
//!
//! **Equal scores.** torchvision sorts the scores with a stable sort, so equal scores keep
//! their row order: lower anchor index first, then lower class. The `max_nms` cut uses torch's
//! `argsort(descending=True)`, whose order for ties is not specified; this code uses a stable
//! sort there too, which is what the CPU kernel does in practice.
//!
//! **Arithmetic.** The IoU is torchvision's `inter / (area_i + area_j - inter)` in f32 on the
//! class-shifted boxes (the shift changes the rounding, so it is applied exactly as ultralytics
//! does), compared with the threshold in f64 as its C++ kernel does. F16 and BF16 input is
//! compared with `conf_thres` rounded to that type (as PyTorch compares a tensor with a Python
//! scalar) and then widened to f32. ultralytics' per-batch time limit is not reproduced.
//!
//! A head output on CUDA is suppressed there, the whole batch in three launches
//! (backend/src/cuda/nms.rs), and only the kept rows come back; its rows equal this file's
//! exactly. On the CPU, images run in parallel with rayon.

use super::boxes::{xywh_to_xyxy, Box4};
use crate::backend::spec::nms::{NmsParams, MAX_NMS_ROWS};
use crate::ops::nms::suppress_on_device;
use crate::{bail, DType, Device, Result, Tensor};
use half::{bf16, f16};
use rayon::prelude::*;
use std::cmp::Ordering;

/// The knobs of `non_max_suppression`; field names follow ultralytics' arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct NmsOptions {
    /// Rows need a class score strictly above this.
    pub conf_thres: f64,
    /// Rows whose IoU with a kept row is strictly above this are suppressed.
    pub iou_thres: f64,
    /// Keep only these classes (`None`: all).
    pub classes: Option<Vec<usize>>,
    /// Suppress across classes (no class offset).
    pub agnostic: bool,
    /// One row per class above `conf_thres` instead of the best class only. Ignored with one
    /// class, as in ultralytics.
    pub multi_label: bool,
    /// Rows returned per image.
    pub max_det: usize,
    /// Rows entering suppression per image (the highest scores).
    pub max_nms: usize,
    /// The per-class coordinate offset that keeps classes apart.
    pub max_wh: f32,
    /// The class count; channels after `4 + nc` are extras (mask coefficients) and ignored.
    /// 0 infers `channels - 4`.
    pub nc: usize,
}

impl Default for NmsOptions {
    /// ultralytics' function defaults: conf 0.25, IoU 0.45, best class only, 300 detections.
    fn default() -> Self {
        NmsOptions {
            conf_thres: 0.25,
            iou_thres: 0.45,
            classes: None,
            agnostic: false,
            multi_label: false,
            max_det: 300,
            max_nms: 30000,
            max_wh: 7680.0,
            nc: 0,
        }
    }
}

impl NmsOptions {
    /// What `DetectionValidator.postprocess` passes: conf 0.001, IoU 0.7, multi-label, 300.
    pub fn validation() -> Self {
        NmsOptions {
            conf_thres: 0.001,
            iou_thres: 0.7,
            multi_label: true,
            ..NmsOptions::default()
        }
    }

    /// What the detection predictor passes by default: conf 0.25, IoU 0.7, best class.
    pub fn prediction() -> Self {
        NmsOptions {
            iou_thres: 0.7,
            ..NmsOptions::default()
        }
    }

    fn check(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.conf_thres) {
            bail!(
                "non_max_suppression",
                "conf_thres must be in [0, 1], got {}",
                self.conf_thres
            );
        }
        if !(0.0..=1.0).contains(&self.iou_thres) {
            bail!(
                "non_max_suppression",
                "iou_thres must be in [0, 1], got {}",
                self.iou_thres
            );
        }
        Ok(())
    }
}

/// The rows one image keeps, in descending score order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Detections {
    /// `[x1, y1, x2, y2]` in the input's pixel space.
    pub boxes: Vec<Box4>,
    pub scores: Vec<f32>,
    pub classes: Vec<usize>,
    /// The anchor (column of the head output) each row came from.
    pub anchors: Vec<usize>,
}

impl Detections {
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// ultralytics' output rows `(x1, y1, x2, y2, conf, cls)`.
    pub fn rows(&self) -> Vec<[f32; 6]> {
        (0..self.len())
            .map(|i| {
                let b = self.boxes[i];
                [
                    b[0],
                    b[1],
                    b[2],
                    b[3],
                    self.scores[i],
                    self.classes[i] as f32,
                ]
            })
            .collect()
    }
}

/// NMS of a head output `[batch, 4 + nc (+ extras), anchors]` (F32, F16 or BF16): on the
/// tensor's device when that is CUDA, else on the host. One `Detections` per image.
pub fn non_max_suppression(pred: &Tensor, opts: &NmsOptions) -> Result<Vec<Detections>> {
    opts.check()?;
    let &[batch, channels, anchors] = pred.dims() else {
        bail!(
            "non_max_suppression",
            "expects a head output [batch, 4 + classes, anchors], got shape {:?}",
            pred.dims()
        );
    };
    let conf_cmp = match pred.dtype() {
        DType::F32 => opts.conf_thres as f32,
        DType::F16 => f16::from_f64(opts.conf_thres).to_f32(),
        DType::BF16 => bf16::from_f64(opts.conf_thres).to_f32(),
        other => bail!(
            "non_max_suppression",
            "expects F32, F16 or BF16 scores, got {other:?}"
        ),
    };
    let head = HeadLayout::new(channels, anchors, opts.nc)?;
    if matches!(pred.device(), Device::Cuda(_)) && opts.max_nms <= MAX_NMS_ROWS {
        return nms_cuda(pred, head, conf_cmp, opts);
    }
    let data = pred.to_vec::<f32>()?;
    Ok(nms_cpu(&data, batch, head, conf_cmp, opts))
}

/// The device path: the backend returns each kept row as its index `anchor * nc + class` with
/// its box and score.
fn nms_cuda(
    pred: &Tensor,
    head: HeadLayout,
    conf_cmp: f32,
    opts: &NmsOptions,
) -> Result<Vec<Detections>> {
    let params = NmsParams {
        conf: conf_cmp,
        iou: opts.iou_thres,
        nc: head.nc,
        multi_label: opts.multi_label && head.nc > 1,
        max_nms: opts.max_nms,
        max_det: opts.max_det,
        offset: if opts.agnostic { 0.0 } else { opts.max_wh },
        keep_class: (0..head.nc)
            .map(|c| opts.classes.as_ref().is_none_or(|keep| keep.contains(&c)))
            .collect(),
    };
    let kept = suppress_on_device(pred, &params)?;
    Ok(kept
        .into_iter()
        .map(|rows| {
            let mut out = Detections::default();
            for (row, v) in rows {
                let row = row as usize;
                out.boxes.push([v[0], v[1], v[2], v[3]]);
                out.scores.push(v[4]);
                out.classes.push(row % head.nc);
                out.anchors.push(row / head.nc);
            }
            out
        })
        .collect())
}

/// Where the boxes and class scores sit in one image's `[channels, anchors]` block.
#[derive(Clone, Copy, Debug)]
struct HeadLayout {
    channels: usize,
    anchors: usize,
    nc: usize,
}

impl HeadLayout {
    fn new(channels: usize, anchors: usize, nc: usize) -> Result<HeadLayout> {
        let nc = if nc == 0 {
            channels.saturating_sub(4)
        } else {
            nc
        };
        if nc == 0 || 4 + nc > channels {
            bail!(
                "non_max_suppression",
                "{channels} channels cannot hold 4 box coordinates and {nc} class scores"
            );
        }
        Ok(HeadLayout {
            channels,
            anchors,
            nc,
        })
    }

    fn at(&self, image: &[f32], channel: usize, anchor: usize) -> f32 {
        image[channel * self.anchors + anchor]
    }

    fn box_xyxy(&self, image: &[f32], anchor: usize) -> Box4 {
        xywh_to_xyxy(std::array::from_fn(|k| self.at(image, k, anchor)))
    }
}

/// The CPU path over host data laid out `[batch, channels, anchors]`.
fn nms_cpu(
    data: &[f32],
    batch: usize,
    head: HeadLayout,
    conf_cmp: f32,
    opts: &NmsOptions,
) -> Vec<Detections> {
    let per_image = head.channels * head.anchors;
    (0..batch)
        .into_par_iter()
        .map(|b| {
            let image = &data[b * per_image..(b + 1) * per_image];
            nms_image(image, head, conf_cmp, opts)
        })
        .collect()
}

/// One candidate row before suppression.
#[derive(Clone, Copy, Debug)]
struct Row {
    bbox: Box4,
    score: f32,
    class: usize,
    anchor: usize,
}

fn nms_image(image: &[f32], head: HeadLayout, conf_cmp: f32, opts: &NmsOptions) -> Detections {
    let mut rows = candidate_rows(image, head, conf_cmp, opts.multi_label && head.nc > 1);
    if let Some(keep) = &opts.classes {
        rows.retain(|r| keep.contains(&r.class));
    }
    if rows.len() > opts.max_nms {
        // A stable sort, so ties keep their row order (see the module comment).
        rows.sort_by(|a, b| score_descending(a.score, b.score));
        rows.truncate(opts.max_nms);
    }
    let offset = if opts.agnostic { 0.0 } else { opts.max_wh };
    let shifted: Vec<Box4> = rows
        .iter()
        .map(|r| {
            let c = r.class as f32 * offset;
            [r.bbox[0] + c, r.bbox[1] + c, r.bbox[2] + c, r.bbox[3] + c]
        })
        .collect();
    let scores: Vec<f32> = rows.iter().map(|r| r.score).collect();
    let kept = nms_indices(&shifted, &scores, opts.iou_thres, opts.max_det);
    let mut out = Detections::default();
    for i in kept {
        let r = rows[i];
        out.boxes.push(r.bbox);
        out.scores.push(r.score);
        out.classes.push(r.class);
        out.anchors.push(r.anchor);
    }
    out
}

/// The rows of one image in ultralytics' order: by anchor, then by class.
fn candidate_rows(image: &[f32], head: HeadLayout, conf_cmp: f32, multi_label: bool) -> Vec<Row> {
    let class_score = |k: usize, a: usize| head.at(image, 4 + k, a);
    // The largest score per anchor, scanning channel rows for contiguous reads; NaN wins, as
    // torch's `amax` propagates it (and then fails the threshold).
    let mut best = vec![f32::NEG_INFINITY; head.anchors];
    for k in 0..head.nc {
        for (a, m) in best.iter_mut().enumerate() {
            let v = class_score(k, a);
            if !m.is_nan() && (v.is_nan() || v > *m) {
                *m = v;
            }
        }
    }
    let mut rows = Vec::new();
    for (anchor, &m) in best.iter().enumerate() {
        // NaN scores are never candidates (`m > conf` is false for them, as in torch).
        if m.partial_cmp(&conf_cmp) != Some(std::cmp::Ordering::Greater) {
            continue;
        }
        let bbox = head.box_xyxy(image, anchor);
        if multi_label {
            for class in 0..head.nc {
                let score = class_score(class, anchor);
                if score > conf_cmp {
                    rows.push(Row {
                        bbox,
                        score,
                        class,
                        anchor,
                    });
                }
            }
        } else {
            // torch's `max(1)`: the first index of the largest value.
            let (mut class, mut score) = (0, class_score(0, anchor));
            for k in 1..head.nc {
                let v = class_score(k, anchor);
                if v > score {
                    (class, score) = (k, v);
                }
            }
            rows.push(Row {
                bbox,
                score,
                class,
                anchor,
            });
        }
    }
    rows
}

/// torchvision's `nms` (CPU kernel): indices of the kept boxes in descending score order, at
/// most `limit` of them. Equal scores are visited in index order (a stable sort). A box is
/// suppressed when its IoU with a kept box, computed in f32, is strictly above `iou_thres`;
/// stopping at `limit` kept boxes gives the same prefix as running to the end, since later
/// boxes never remove earlier ones.
pub fn nms_indices(boxes: &[Box4], scores: &[f32], iou_thres: f64, limit: usize) -> Vec<usize> {
    let n = boxes.len().min(scores.len());
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| score_descending(scores[a], scores[b]));
    // Boxes and areas in visiting order, so the inner scan reads memory front to back.
    let sorted: Vec<Box4> = order.iter().map(|&i| boxes[i]).collect();
    let areas: Vec<f32> = sorted
        .iter()
        .map(|b| (b[2] - b[0]) * (b[3] - b[1]))
        .collect();
    let mut suppressed = vec![false; n];
    let mut keep = Vec::new();
    for i in 0..n {
        if keep.len() >= limit {
            break;
        }
        if suppressed[i] {
            continue;
        }
        keep.push(order[i]);
        let bi = sorted[i];
        for j in i + 1..n {
            if suppressed[j] {
                continue;
            }
            let bj = &sorted[j];
            let w = cpp_max(0.0, cpp_min(bi[2], bj[2]) - cpp_max(bi[0], bj[0]));
            let h = cpp_max(0.0, cpp_min(bi[3], bj[3]) - cpp_max(bi[1], bj[1]));
            let inter = w * h;
            let iou = inter / (areas[i] + areas[j] - inter);
            if f64::from(iou) > iou_thres {
                suppressed[j] = true;
            }
        }
    }
    keep
}

/// Descending scores as torch sorts them: NaN first, then larger values; equal values compare
/// equal (so -0.0 ties with 0.0) and a stable sort keeps their order.
fn score_descending(a: f32, b: f32) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        _ => b.partial_cmp(&a).unwrap_or(Ordering::Equal),
    }
}

/// `std::max(a, b)` from C++: `a < b ? b : a` (its NaN behaviour differs from `f32::max`).
fn cpp_max(a: f32, b: f32) -> f32 {
    if a < b {
        b
    } else {
        a
    }
}

/// `std::min(a, b)` from C++: `b < a ? b : a`.
fn cpp_min(a: f32, b: f32) -> f32 {
    if b < a {
        b
    } else {
        a
    }
}

#[cfg(test)]
#[path = "nms_tests.rs"]
mod tests;
