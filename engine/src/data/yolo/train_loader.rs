//! The training loader: ultralytics' augmented training batches (8.4.190 defaults), made on
//! worker threads ahead of the consumer, reproducible from a seed.
//!
//! An epoch serves every image once, in a shuffled order drawn from `(seed, epoch)`, in batches
//! of `batch_size` (at most the dataset's size, as ultralytics caps it; the last batch may be
//! smaller: ultralytics does not drop it). Each sample's draws come from `(seed, epoch, image
//! index)` (`vision::augment::sample_generator`), so a batch is the same on every run and any
//! number of worker threads. For the last `close_mosaic` epochs the mosaic is off and each image
//! goes alone through the affine (scale, translate) into the square, as ultralytics'
//! `close_mosaic` leaves it.
//!
//! Batches are collated as ultralytics' `collate_fn`: U8 NCHW RGB images, and one row per box
//! with its image's place in the batch (`batch_idx`), its class and its normalised centre-size
//! box.
//!
//! A mosaic's three other images: ultralytics draws them from a buffer of the images its
//! worker loaded last (up to `min(n, 8 * batch, 1000)`), whose contents depend on its worker
//! processes' timing. Here they are drawn from that many images served last in the epoch's
//! order (reaching into the previous epoch at the start), which depends on nothing but the
//! seed; those images are still in memory (`image_cache`), so a mosaic costs about one decode.
//! With `cache` on, every image stays in memory and the others are drawn from the whole
//! dataset, as ultralytics does with `cache="ram"`. ultralytics' optional Albumentations step
//! (only when that package is installed) is not done.

use super::image_cache::ImageCache;
use super::labels::YoloDataset;
use super::loader::hwc_to_chw;
use crate::data::ordered_pool::{default_workers, OrderedPool};
use crate::vision::augment::{
    augment, sample_generator, shuffle_generator, AugmentConfig, AugmentedSample, Partners,
    SampleDraws, TrainImage,
};
use crate::{Error, Result, Tensor};
use std::sync::Arc;

/// How to batch and augment.
#[derive(Clone, Debug)]
pub struct TrainLoaderOptions {
    pub batch_size: usize,
    /// Worker threads (0: one per core, at most 8).
    pub workers: usize,
    /// Batches made ahead of the consumer.
    pub prefetch: usize,
    /// Seeds the shuffle and every sample's draws.
    pub seed: u64,
    /// A new random order each epoch (else file order).
    pub shuffle: bool,
    /// Leaves out a final batch smaller than `batch_size` (ultralytics trains with it off).
    pub drop_last: bool,
    /// The run's length in epochs, which `close_mosaic` counts back from.
    pub epochs: usize,
    /// Epochs at the end without mosaic (0: never closed).
    pub close_mosaic: usize,
    /// Keeps every loaded (resized) image in memory after its first use, and draws mosaic
    /// partners from the whole dataset (ultralytics' `cache="ram"`): faster from the second
    /// epoch, at `imgsz`² x 3 bytes or less per image. Off, only the images of the mosaic
    /// window stay in memory.
    pub cache: bool,
    pub augment: AugmentConfig,
}

impl Default for TrainLoaderOptions {
    fn default() -> Self {
        TrainLoaderOptions {
            batch_size: 16,
            workers: 0,
            prefetch: 4,
            seed: 0,
            shuffle: true,
            drop_last: false,
            epochs: 100,
            close_mosaic: 10,
            cache: false,
            augment: AugmentConfig::default(),
        }
    }
}

/// One collated batch.
#[derive(Clone, Debug)]
pub struct TrainBatch {
    /// U8 `[B, 3, imgsz, imgsz]`, RGB, on the host.
    pub images: Tensor,
    /// F32 `[N]`: each box's image, as its place in this batch.
    pub batch_idx: Tensor,
    /// F32 `[N, 1]`: each box's class.
    pub cls: Tensor,
    /// F32 `[N, 4]`: each box as normalised `[cx, cy, w, h]`.
    pub bboxes: Tensor,
    /// Each image's index in `YoloDataset::images`.
    pub indices: Vec<usize>,
    pub epoch: usize,
}

impl TrainBatch {
    /// The rows `[batch_idx, cls, cx, cy, w, h]` in one F32 `[N, 6]` tensor, as ultralytics'
    /// detection loss assembles them.
    pub fn targets(&self) -> Result<Tensor> {
        let n = self.batch_idx.dims()[0];
        let (idx, cls, b) = (
            self.batch_idx.to_vec::<f32>()?,
            self.cls.to_vec::<f32>()?,
            self.bboxes.to_vec::<f32>()?,
        );
        let mut rows = Vec::with_capacity(n * 6);
        for i in 0..n {
            rows.extend_from_slice(&[idx[i], cls[i]]);
            rows.extend_from_slice(&b[i * 4..i * 4 + 4]);
        }
        Tensor::from_vec(rows, &[n, 6])
    }
}

/// The loader. Epochs are started from it one at a time (or side by side).
pub struct TrainLoader {
    dataset: Arc<YoloDataset>,
    opts: TrainLoaderOptions,
    batch_size: usize,
    /// How many of the images served last a mosaic draws its others from (ultralytics'
    /// buffer length); `None`: any image (with `cache`, as ultralytics with `cache="ram"`).
    window: Option<usize>,
    cache: Arc<ImageCache>,
}

impl TrainLoader {
    pub fn new(dataset: Arc<YoloDataset>, opts: TrainLoaderOptions) -> Result<TrainLoader> {
        opts.augment.validate()?;
        if opts.batch_size == 0 {
            return Err(Error::invalid(
                "yolo train loader",
                "batch_size must be positive",
            ));
        }
        let n = dataset.images.len();
        if n == 0 {
            return Err(Error::invalid(
                "yolo train loader",
                "the dataset has no images",
            ));
        }
        let batch_size = opts.batch_size.min(n);
        let imgsz = opts.augment.imgsz;
        let (window, cache) = if opts.cache {
            (None, ImageCache::all(n, imgsz))
        } else {
            // ultralytics' `max_buffer_length`; the cache also holds what the workers have in
            // flight, so most of the window is still decoded when a mosaic asks for it.
            let window = n.min(opts.batch_size * 8).min(1000);
            let in_flight = batch_size * (opts.prefetch + 2) + 4 * default_workers(opts.workers);
            (Some(window), ImageCache::recent(window + in_flight, imgsz))
        };
        Ok(TrainLoader {
            dataset,
            opts,
            batch_size,
            window,
            cache: Arc::new(cache),
        })
    }

    pub fn dataset(&self) -> &Arc<YoloDataset> {
        &self.dataset
    }

    pub fn options(&self) -> &TrainLoaderOptions {
        &self.opts
    }

    /// The batch size in use (the option, capped at the number of images).
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Batches in each epoch.
    pub fn batches_per_epoch(&self) -> usize {
        let n = self.dataset.images.len();
        if self.opts.drop_last && !n.is_multiple_of(self.batch_size) && n > self.batch_size {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }

    /// Whether epoch `epoch` (from 0) uses the mosaic: ultralytics closes it from epoch
    /// `epochs - close_mosaic` on.
    pub fn mosaic_enabled(&self, epoch: usize) -> bool {
        let closed = self.opts.close_mosaic > 0
            && epoch >= self.opts.epochs.saturating_sub(self.opts.close_mosaic);
        self.opts.augment.mosaic > 0.0 && !closed
    }

    /// The order epoch `epoch` serves the images in (indices into the dataset).
    pub fn epoch_order(&self, epoch: usize) -> Vec<usize> {
        let n = self.dataset.images.len();
        let mut order = if self.opts.shuffle {
            shuffle_generator(self.opts.seed, epoch as u64).permutation(n)
        } else {
            (0..n).collect()
        };
        order.truncate(self.batches_per_epoch() * self.batch_size);
        order
    }

    /// The draws of image `index` in epoch `epoch`.
    pub fn draws(&self, epoch: usize, index: usize) -> Result<SampleDraws> {
        let job = self.epoch_job(epoch);
        job.draws(job.position_of(index)?)
    }

    /// Image `index` as epoch `epoch` augments it (what the batches hold, one at a time).
    pub fn sample(&self, epoch: usize, index: usize) -> Result<AugmentedSample> {
        let job = self.epoch_job(epoch);
        job.sample(job.position_of(index)?)
    }

    /// Starts epoch `epoch`'s workers and returns its batches.
    pub fn epoch(&self, epoch: usize) -> TrainEpoch {
        let job = Arc::new(self.epoch_job(epoch));
        let worker_job = job.clone();
        let pool = OrderedPool::new(
            "yolo train loader",
            job.order.len(),
            self.opts.workers,
            self.batch_size * self.opts.prefetch.max(1),
            move |position| {
                worker_job
                    .sample(position)
                    .map(|s| (hwc_to_chw(&s.image), s.classes, s.boxes))
            },
        );
        TrainEpoch {
            job,
            batch_size: self.batch_size,
            imgsz: self.opts.augment.imgsz,
            epoch,
            next_position: 0,
            pool,
        }
    }

    fn epoch_job(&self, epoch: usize) -> EpochJob {
        let order = self.epoch_order(epoch);
        // The images served last before this epoch: the end of the previous one.
        let previous_tail = match (epoch, self.window) {
            (1.., Some(w)) => {
                let prev = self.epoch_order(epoch - 1);
                prev[prev.len().saturating_sub(w.saturating_sub(1))..].to_vec()
            }
            _ => Vec::new(),
        };
        EpochJob {
            dataset: self.dataset.clone(),
            cache: self.cache.clone(),
            config: self.opts.augment.clone(),
            seed: self.opts.seed,
            epoch,
            mosaic: self.mosaic_enabled(epoch),
            window: self.window,
            order,
            previous_tail,
        }
    }
}

/// Everything a worker needs to make any sample of one epoch.
struct EpochJob {
    dataset: Arc<YoloDataset>,
    cache: Arc<ImageCache>,
    config: AugmentConfig,
    seed: u64,
    epoch: usize,
    mosaic: bool,
    window: Option<usize>,
    order: Vec<usize>,
    previous_tail: Vec<usize>,
}

impl EpochJob {
    fn position_of(&self, index: usize) -> Result<usize> {
        self.order.iter().position(|&i| i == index).ok_or_else(|| {
            Error::invalid(
                "yolo train loader",
                format!(
                    "image {index} is not served in epoch {} (past the dataset, or left out by drop_last)",
                    self.epoch
                ),
            )
        })
    }

    /// The draws of the sample at `position`, its mosaic partners among the `window` images
    /// served last (itself included), reaching back into the previous epoch at the start.
    fn draws(&self, position: usize) -> Result<SampleDraws> {
        let index = self.order[position];
        let mut rng = sample_generator(self.seed, self.epoch as u64, index as u64);
        let n = self.dataset.images.len();
        match self.window {
            None => SampleDraws::draw(&self.config, self.mosaic, Partners::Any(n), &mut rng),
            Some(w) => {
                let own = &self.order[(position + 1).saturating_sub(w)..=position];
                let earlier = w - own.len();
                let tail = &self.previous_tail[self.previous_tail.len().saturating_sub(earlier)..];
                let candidates: Vec<usize> = tail.iter().chain(own).copied().collect();
                SampleDraws::draw(
                    &self.config,
                    self.mosaic,
                    Partners::Among(&candidates),
                    &mut rng,
                )
            }
        }
    }

    fn sample(&self, position: usize) -> Result<AugmentedSample> {
        let draws = self.draws(position)?;
        let own = self.cache.get(&self.dataset, self.order[position])?;
        let others = match &draws.mosaic {
            Some(m) => m
                .others
                .iter()
                .map(|&i| self.cache.get(&self.dataset, i))
                .collect::<Result<Vec<_>>>()?,
            None => Vec::new(),
        };
        let others: Vec<&TrainImage> = others.iter().map(|t| t.as_ref()).collect();
        augment(&own, &others, &draws, self.config.imgsz)
    }
}

/// One epoch's batches, in order; an iterator over `Result<TrainBatch>`. Dropping it stops its
/// workers.
pub struct TrainEpoch {
    job: Arc<EpochJob>,
    batch_size: usize,
    imgsz: usize,
    epoch: usize,
    next_position: usize,
    pool: OrderedPool<Result<Prepared>>,
}

/// A sample as the workers hand it over: CHW pixels, classes, normalised boxes.
type Prepared = (Vec<u8>, Vec<usize>, Vec<[f32; 4]>);

impl TrainEpoch {
    /// Batches left in this epoch.
    pub fn remaining(&self) -> usize {
        (self.job.order.len() - self.next_position).div_ceil(self.batch_size)
    }

    fn collate(&mut self, start: usize, end: usize) -> Result<TrainBatch> {
        let s = self.imgsz;
        let mut pixels = Vec::with_capacity((end - start) * 3 * s * s);
        let (mut batch_idx, mut cls, mut bboxes) = (Vec::new(), Vec::new(), Vec::new());
        for (slot, position) in (start..end).enumerate() {
            let (chw, classes, boxes) = self.pool.take(position)??;
            if chw.len() != 3 * s * s {
                return Err(Error::invalid(
                    "yolo train loader",
                    format!("sample {position} came out the wrong size"),
                ));
            }
            pixels.extend_from_slice(&chw);
            batch_idx.extend(std::iter::repeat_n(slot as f32, classes.len()));
            cls.extend(classes.iter().map(|&c| c as f32));
            bboxes.extend(boxes.iter().flatten().copied());
        }
        let n = batch_idx.len();
        Ok(TrainBatch {
            images: Tensor::from_vec(pixels, &[end - start, 3, s, s])?,
            batch_idx: Tensor::from_vec(batch_idx, &[n])?,
            cls: Tensor::from_vec(cls, &[n, 1])?,
            bboxes: Tensor::from_vec(bboxes, &[n, 4])?,
            indices: self.job.order[start..end].to_vec(),
            epoch: self.epoch,
        })
    }
}

impl Iterator for TrainEpoch {
    type Item = Result<TrainBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let start = self.next_position;
        let len = self.job.order.len();
        if start >= len {
            return None;
        }
        let end = (start + self.batch_size).min(len);
        self.next_position = end;
        Some(self.collate(start, end))
    }
}
