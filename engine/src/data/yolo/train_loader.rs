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
//! box. Two differences from ultralytics, both about which images join a mosaic: ultralytics
//! picks the three others from a buffer of recently loaded images (which depends on its worker
//! processes' timing); here they are drawn from the whole dataset, as ultralytics does with
//! `cache="ram"`. Its optional Albumentations step (only when that package is installed) is
//! not done.

use super::labels::{ImageEntry, YoloDataset};
use super::loader::hwc_to_chw;
use crate::data::ordered_pool::OrderedPool;
use crate::vision::augment::{
    augment, sample_generator, shuffle_generator, AugmentConfig, AugmentedSample, SampleDraws,
    TrainImage,
};
use crate::vision::image::read_rgb;
use crate::vision::letterbox::load_size;
use crate::vision::resize::resize_linear;
use crate::{Error, Result, Tensor};
use std::sync::{Arc, OnceLock};

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
    /// Keeps every loaded (resized) image in memory after its first use (ultralytics'
    /// `cache="ram"`): faster from the second epoch, `imgsz`² x 3 bytes or less per image.
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

/// The loader. Cheap to share: epochs are started from it one at a time or side by side.
pub struct TrainLoader {
    dataset: Arc<YoloDataset>,
    opts: TrainLoaderOptions,
    batch_size: usize,
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
        if dataset.images.is_empty() {
            return Err(Error::invalid("yolo train loader", "the dataset has no images"));
        }
        let batch_size = opts.batch_size.min(dataset.images.len());
        let cache = Arc::new(ImageCache::new(
            dataset.images.len(),
            opts.cache,
            opts.augment.imgsz,
        ));
        Ok(TrainLoader {
            dataset,
            opts,
            batch_size,
            cache,
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
        if self.opts.drop_last && n % self.batch_size != 0 && n > self.batch_size {
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
        SampleDraws::draw(
            &self.opts.augment,
            self.mosaic_enabled(epoch),
            self.dataset.images.len(),
            &mut sample_generator(self.opts.seed, epoch as u64, index as u64),
        )
    }

    /// Image `index` as epoch `epoch` augments it (what the batches hold, one at a time).
    pub fn sample(&self, epoch: usize, index: usize) -> Result<AugmentedSample> {
        make_sample(&self.dataset, &self.cache, &self.opts.augment, self.draws(epoch, index)?, index)
    }

    /// Starts epoch `epoch`'s workers and returns its batches.
    pub fn epoch(&self, epoch: usize) -> TrainEpoch {
        let order = Arc::new(self.epoch_order(epoch));
        let (dataset, cache, order_w) = (self.dataset.clone(), self.cache.clone(), order.clone());
        let config = self.opts.augment.clone();
        let mosaic = self.mosaic_enabled(epoch);
        let seed = self.opts.seed;
        let pool = OrderedPool::new(
            "yolo train loader",
            order.len(),
            self.opts.workers,
            self.batch_size * self.opts.prefetch.max(1),
            move |position| {
                let index = order_w[position];
                let mut rng = sample_generator(seed, epoch as u64, index as u64);
                SampleDraws::draw(&config, mosaic, dataset.images.len(), &mut rng)
                    .and_then(|draws| make_sample(&dataset, &cache, &config, draws, index))
                    .map(|s| (hwc_to_chw(&s.image), s.classes, s.boxes))
            },
        );
        TrainEpoch {
            order,
            batch_size: self.batch_size,
            imgsz: self.opts.augment.imgsz,
            epoch,
            next_position: 0,
            pool,
        }
    }
}

/// One epoch's batches, in order; an iterator over `Result<TrainBatch>`. Dropping it stops its
/// workers.
pub struct TrainEpoch {
    order: Arc<Vec<usize>>,
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
        (self.order.len() - self.next_position).div_ceil(self.batch_size)
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
            indices: self.order[start..end].to_vec(),
            epoch: self.epoch,
        })
    }
}

impl Iterator for TrainEpoch {
    type Item = Result<TrainBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let start = self.next_position;
        if start >= self.order.len() {
            return None;
        }
        let end = (start + self.batch_size).min(self.order.len());
        self.next_position = end;
        Some(self.collate(start, end))
    }
}

/// Loads what `draws` needs and augments image `index`.
fn make_sample(
    dataset: &YoloDataset,
    cache: &ImageCache,
    config: &AugmentConfig,
    draws: SampleDraws,
    index: usize,
) -> Result<AugmentedSample> {
    let own = cache.get(dataset, index)?;
    let others = match &draws.mosaic {
        Some(m) => m
            .others
            .iter()
            .map(|&i| cache.get(dataset, i))
            .collect::<Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    let others: Vec<&TrainImage> = others.iter().map(|t| t.as_ref()).collect();
    augment(&own, &others, &draws, config.imgsz)
}

/// ultralytics' `load_image` for training: the image decoded and resized so its long side is
/// `imgsz`, with its labels.
pub fn load_train_image(entry: &ImageEntry, imgsz: usize) -> Result<TrainImage> {
    let img = read_rgb(&entry.path)?;
    let (w0, h0) = (img.width() as usize, img.height() as usize);
    let (w, h) = load_size(w0, h0, imgsz);
    let image = if (w, h) == (w0, h0) {
        img
    } else {
        resize_linear(&img, w, h)
    };
    Ok(TrainImage {
        image,
        classes: entry.labels.iter().map(|b| b.class).collect(),
        boxes: entry.labels.iter().map(|b| b.xywh).collect(),
    })
}

/// Loaded images, kept after first use when caching is on.
struct ImageCache {
    slots: Option<Vec<OnceLock<Arc<TrainImage>>>>,
    imgsz: usize,
}

impl ImageCache {
    fn new(len: usize, enabled: bool, imgsz: usize) -> ImageCache {
        ImageCache {
            slots: enabled.then(|| (0..len).map(|_| OnceLock::new()).collect()),
            imgsz,
        }
    }

    fn get(&self, dataset: &YoloDataset, index: usize) -> Result<Arc<TrainImage>> {
        let entry = dataset.images.get(index).ok_or_else(|| {
            Error::invalid(
                "yolo train loader",
                format!("image {index} is past the {} images", dataset.images.len()),
            )
        })?;
        let Some(slots) = &self.slots else {
            return Ok(Arc::new(load_train_image(entry, self.imgsz)?));
        };
        let slot = &slots[index];
        if let Some(img) = slot.get() {
            return Ok(img.clone());
        }
        // Two workers may load the same image at once; both results are identical.
        let img = Arc::new(load_train_image(entry, self.imgsz)?);
        Ok(slot.get_or_init(|| img).clone())
    }
}
