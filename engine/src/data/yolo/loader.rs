//! The validation loader: decodes and letterboxes images on worker threads ahead of the
//! consumer and hands out batches in ultralytics' order.
//!
//! With `rect` (what `model.val()` uses) images are ordered by aspect ratio and each batch
//! gets its own canvas (`vision::rect`); otherwise they keep file order (or the order given,
//! a shuffled training epoch) and every canvas is `imgsz` x `imgsz`. Worker threads decode
//! ahead of the consumer through `data::ordered_pool`, at most `prefetch` batches' worth;
//! dropping the loader stops and joins them.
//!
//! Batches are U8 NCHW RGB, `[B, 3, H, W]`: the layout YOLO models take, so the consumer only
//! converts the dtype (`/ 255`) and moves it to the device; the transpose from HWC is done
//! on the workers, in parallel, rather than on the consumer's thread.
//!
//! Labels stay normalised to the original image (ultralytics normalises them to the canvas and
//! maps them back with `scale_boxes`; the two agree to float rounding).

use super::labels::{YoloBox, YoloDataset};
use crate::data::ordered_pool::OrderedPool;
use crate::vision::image::read_rgb;
use crate::vision::{preprocess_val, rect_batch_shapes, rect_order, RatioPad, RgbImage};
use crate::{Error, Result, Tensor};
use std::path::PathBuf;
use std::sync::Arc;

/// How to batch and preprocess.
#[derive(Clone, Debug)]
pub struct ValLoaderOptions {
    pub batch_size: usize,
    pub imgsz: usize,
    /// The model's largest stride (rect canvases are multiples of it).
    pub stride: usize,
    /// Rectangular batches, ordered by aspect ratio (ultralytics' `rect=True`).
    pub rect: bool,
    /// Worker threads (0: one per core, at most 8).
    pub workers: usize,
    /// Batches decoded ahead of the consumer.
    pub prefetch: usize,
    /// Serve the images in this order (indices into the dataset, e.g. a shuffled epoch) on
    /// `imgsz` x `imgsz` canvases; needs `rect` off. `None`: file order, or aspect-ratio order
    /// with `rect`.
    pub order: Option<Vec<usize>>,
    /// Leaves out a final batch smaller than `batch_size`.
    pub drop_last: bool,
}

impl Default for ValLoaderOptions {
    fn default() -> Self {
        ValLoaderOptions {
            batch_size: 16,
            imgsz: 640,
            stride: 32,
            rect: true,
            workers: 0,
            prefetch: 2,
            order: None,
            drop_last: false,
        }
    }
}

/// One batch.
#[derive(Clone, Debug)]
pub struct YoloBatch {
    /// U8 `[B, 3, H, W]`, RGB, on the host.
    pub images: Tensor,
    /// Each image's index in `YoloDataset::images`.
    pub indices: Vec<usize>,
    pub paths: Vec<PathBuf>,
    /// Original (height, width) of each image.
    pub orig_hw: Vec<(usize, usize)>,
    /// How to map each image's predictions back (`vision::scale_boxes`).
    pub ratio_pad: Vec<RatioPad>,
    /// Each image's labels, normalised to the original image.
    pub labels: Vec<Vec<YoloBox>>,
}

/// One image's place in the order and its canvas.
#[derive(Clone)]
struct Job {
    index: usize,
    path: PathBuf,
    canvas_hw: (usize, usize),
}

/// The loader: an iterator over `Result<YoloBatch>`.
pub struct ValLoader {
    dataset: Arc<YoloDataset>,
    jobs: Arc<Vec<Job>>,
    batch_size: usize,
    next_position: usize,
    pool: OrderedPool<Result<(Vec<u8>, RatioPad)>>,
}

impl ValLoader {
    pub fn new(dataset: Arc<YoloDataset>, opts: &ValLoaderOptions) -> Result<ValLoader> {
        if opts.batch_size == 0 || opts.imgsz == 0 || opts.stride == 0 {
            return Err(Error::invalid(
                "yolo val loader",
                "batch_size, imgsz and stride must be positive",
            ));
        }
        let jobs = Arc::new(plan(&dataset, opts)?);
        let imgsz = opts.imgsz;
        let worker_jobs = jobs.clone();
        let pool = OrderedPool::new(
            "yolo val loader",
            jobs.len(),
            opts.workers,
            opts.batch_size * opts.prefetch.max(1),
            move |position| {
                let job = &worker_jobs[position];
                read_rgb(&job.path).map(|img| {
                    let (out, rp) = preprocess_val(&img, imgsz, Some(job.canvas_hw));
                    (hwc_to_chw(&out), rp)
                })
            },
        );
        Ok(ValLoader {
            dataset,
            jobs,
            batch_size: opts.batch_size,
            next_position: 0,
            pool,
        })
    }

    /// The number of batches.
    pub fn len(&self) -> usize {
        self.jobs.len().div_ceil(self.batch_size)
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

impl Iterator for ValLoader {
    type Item = Result<YoloBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let start = self.next_position;
        if start >= self.jobs.len() {
            return None;
        }
        let end = (start + self.batch_size).min(self.jobs.len());
        self.next_position = end;
        let (h, w) = self.jobs[start].canvas_hw;
        let mut pixels = Vec::with_capacity((end - start) * 3 * h * w);
        let (mut indices, mut paths, mut ratio_pad, mut labels) = (vec![], vec![], vec![], vec![]);
        for position in start..end {
            let (chw, rp) = match self.pool.take(position).and_then(|done| done) {
                Ok(done) => done,
                Err(e) => return Some(Err(e)),
            };
            let job = &self.jobs[position];
            let entry = &self.dataset.images[job.index];
            if chw.len() != 3 * h * w {
                let msg = format!(
                    "{}: preprocessed to the wrong size for its {h}x{w} batch",
                    entry.path.display()
                );
                return Some(Err(Error::invalid("yolo val loader", msg)));
            }
            pixels.extend_from_slice(&chw);
            indices.push(job.index);
            paths.push(entry.path.clone());
            ratio_pad.push(rp);
            labels.push(entry.labels.clone());
        }
        let images = match Tensor::from_vec(pixels, &[end - start, 3, h, w]) {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        let orig_hw = ratio_pad.iter().map(|rp: &RatioPad| rp.orig_hw).collect();
        Some(Ok(YoloBatch {
            images,
            indices,
            paths,
            orig_hw,
            ratio_pad,
            labels,
        }))
    }
}

/// The order images are served in, each with its canvas.
fn plan(dataset: &YoloDataset, opts: &ValLoaderOptions) -> Result<Vec<Job>> {
    let mut jobs =
        match &opts.order {
            None if opts.rect => rect_plan(dataset, opts),
            None => square_plan(dataset, 0..dataset.images.len(), opts.imgsz),
            Some(_) if opts.rect => return Err(Error::invalid(
                "yolo loader",
                "a given order (a shuffle) needs rect off: rect batches follow the aspect ratios",
            )),
            Some(order) => {
                let n = dataset.images.len();
                if let Some(bad) = order.iter().find(|&&i| i >= n) {
                    return Err(Error::invalid(
                        "yolo loader",
                        format!("image index {bad} in the order is past the {n} images"),
                    ));
                }
                square_plan(dataset, order.iter().copied(), opts.imgsz)
            }
        };
    if opts.drop_last {
        jobs.truncate(jobs.len() / opts.batch_size * opts.batch_size);
    }
    Ok(jobs)
}

/// Images in `order`, each on an `imgsz` x `imgsz` canvas.
fn square_plan(
    dataset: &YoloDataset,
    order: impl Iterator<Item = usize>,
    imgsz: usize,
) -> Vec<Job> {
    order
        .map(|index| Job {
            index,
            path: dataset.images[index].path.clone(),
            canvas_hw: (imgsz, imgsz),
        })
        .collect()
}

/// Images by aspect ratio, each batch on the canvas its shapes need (ultralytics' rect).
fn rect_plan(dataset: &YoloDataset, opts: &ValLoaderOptions) -> Vec<Job> {
    let images = &dataset.images;
    let sizes: Vec<(usize, usize)> = images.iter().map(|e| e.size).collect();
    let order = rect_order(&sizes);
    let sorted: Vec<(usize, usize)> = order.iter().map(|&i| sizes[i]).collect();
    let shapes = rect_batch_shapes(&sorted, opts.batch_size, opts.imgsz, opts.stride, 0.5);
    order
        .iter()
        .enumerate()
        .map(|(position, &index)| Job {
            index,
            path: images[index].path.clone(),
            canvas_hw: shapes[position / opts.batch_size],
        })
        .collect()
}

/// Interleaved RGB rows to planar channels.
pub(crate) fn hwc_to_chw(img: &RgbImage) -> Vec<u8> {
    let plane = img.width() as usize * img.height() as usize;
    let mut out = vec![0u8; 3 * plane];
    // Three planes zipped with the pixels: no index arithmetic or bounds checks per byte.
    let (red, rest) = out.split_at_mut(plane);
    let (green, blue) = rest.split_at_mut(plane);
    let planes = red.iter_mut().zip(green.iter_mut()).zip(blue.iter_mut());
    for (px, ((r, g), b)) in img.as_raw().chunks_exact(3).zip(planes) {
        (*r, *g, *b) = (px[0], px[1], px[2]);
    }
    out
}
