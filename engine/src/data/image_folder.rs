//! Image classification folders in the ImageNet layout (torchvision's `ImageFolder`): one
//! subfolder a class, named by it, holding that class's images. Classes are the subfolders'
//! names in sorted order (their index is the label), images are found recursively by
//! extension. A seeded split holds out a fraction of each class.
//!
//! Batches decode on worker threads ahead of the consumer (`ordered_pool`) and go through
//! either the evaluation transform (the checkpoint's image processor) or the usual training
//! augmentation: a random resized crop (by default scale 0.08..1 of the area, aspect 3/4..4/3,
//! as torchvision's `RandomResizedCrop`), a horizontal flip half the time, optionally
//! torchvision's colour jitter, then the processor's rescale and normalisation. Each image's randomness depends only on the seed, the epoch and
//! its position, so a run repeats whatever the thread count.

use super::batch_source::{Batch, BatchSource, Epoch};
use super::mix::{mix_batch, MixOptions};
use super::ordered_pool::OrderedPool;
use crate::vision::color_jitter::ColorJitter;
use crate::vision::image::read_rgb;
use crate::vision::image_processor::{ImageProcessor, ResizeTo};
use crate::vision::pil_resize::{resize_pil, PilFilter};
use crate::vision::RgbImage;
use crate::{Device, Error, Generator, Result, Tensor};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The extensions read as images (any case).
pub const IMAGE_EXTENSIONS: &[&str] = &["jpg", "jpeg", "png"];

#[derive(Clone, Debug)]
pub struct ImageFolder {
    pub root: PathBuf,
    /// Class names by label.
    pub classes: Vec<String>,
    /// (image, label) in sorted path order.
    pub samples: Vec<(PathBuf, usize)>,
}

pub(crate) fn is_image(p: &Path) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .map(|e| e.map(|e| e.path()).map_err(|e| Error::io(dir, e)))
        .collect::<Result<Vec<_>>>()?;
    out.retain(|p| {
        !p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'))
    });
    out.sort();
    Ok(out)
}

pub(crate) fn images_under(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for p in sorted_entries(dir)? {
        if p.is_dir() {
            images_under(&p, out)?;
        } else if is_image(&p) {
            out.push(p);
        }
    }
    Ok(())
}

impl ImageFolder {
    /// Reads the layout. A folder without class subfolders, or a class without images, is an
    /// error that names it (as torchvision refuses an empty class).
    pub fn open(root: impl AsRef<Path>) -> Result<ImageFolder> {
        let root = root.as_ref().to_path_buf();
        let classes: Vec<PathBuf> = sorted_entries(&root)?
            .into_iter()
            .filter(|p| p.is_dir())
            .collect();
        if classes.is_empty() {
            return Err(Error::invalid(
                "image_folder",
                format!(
                    "{} has no class folders (the layout is DIR/<class>/<image>)",
                    root.display()
                ),
            ));
        }
        let mut samples = Vec::new();
        let mut names = Vec::new();
        for (label, dir) in classes.iter().enumerate() {
            let mut files = Vec::new();
            images_under(dir, &mut files)?;
            if files.is_empty() {
                return Err(Error::invalid(
                    "image_folder",
                    format!(
                        "class folder {} has no images ({})",
                        dir.display(),
                        IMAGE_EXTENSIONS.join(", ")
                    ),
                ));
            }
            samples.extend(files.into_iter().map(|f| (f, label)));
            names.push(
                dir.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
        Ok(ImageFolder {
            root,
            classes: names,
            samples,
        })
    }

    /// (train, held-out): `fraction` of each class's images (rounded, at least one where the
    /// class has two or more) drawn by `seed` go to the second.
    pub fn split(&self, fraction: f64, seed: u64) -> Result<(ImageFolder, ImageFolder)> {
        if !(0.0..1.0).contains(&fraction) {
            return Err(Error::invalid(
                "image_folder",
                format!("the held-out fraction must be in [0, 1), got {fraction}"),
            ));
        }
        let mut gen = Generator::new(seed);
        let (mut train, mut held) = (Vec::new(), Vec::new());
        for label in 0..self.classes.len() {
            let of_class: Vec<&(PathBuf, usize)> =
                self.samples.iter().filter(|s| s.1 == label).collect();
            let n = of_class.len();
            let mut k = (n as f64 * fraction).round() as usize;
            if fraction > 0.0 && n >= 2 {
                k = k.clamp(1, n - 1);
            }
            let order = gen.permutation(n);
            for (rank, &i) in order.iter().enumerate() {
                let dest = if rank < k { &mut held } else { &mut train };
                dest.push(of_class[i].clone());
            }
        }
        train.sort();
        held.sort();
        let part = |samples| ImageFolder {
            root: self.root.clone(),
            classes: self.classes.clone(),
            samples,
        };
        Ok((part(train), part(held)))
    }
}

/// The random part of the training transform, as torchvision's ImageNet recipe builds it:
/// `RandomResizedCrop(size, scale=(min_scale, 1))`, `RandomHorizontalFlip(flip)`, then
/// optionally `ColorJitter`.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainAugment {
    /// The smallest share of the image's area a crop may keep (torchvision's 0.08).
    pub min_scale: f64,
    /// The probability of a horizontal flip.
    pub flip: f64,
    pub color_jitter: Option<ColorJitter>,
}

impl Default for TrainAugment {
    fn default() -> Self {
        TrainAugment {
            min_scale: 0.08,
            flip: 0.5,
            color_jitter: None,
        }
    }
}

impl TrainAugment {
    pub fn validate(&self) -> Result<()> {
        if !(self.min_scale > 0.0 && self.min_scale <= 1.0) {
            return Err(Error::invalid(
                "image_folder",
                format!("min_scale must be in (0, 1], not {}", self.min_scale),
            ));
        }
        if !(0.0..=1.0).contains(&self.flip) {
            return Err(Error::invalid(
                "image_folder",
                format!("flip is a probability in [0, 1], not {}", self.flip),
            ));
        }
        Ok(())
    }
}

/// How images become the model's input.
#[derive(Clone, Debug)]
pub enum ImageTransform {
    /// The processor as it is (resize, crop, normalise).
    Eval(ImageProcessor),
    /// The augmentation to `size` x `size`, then the processor's rescale and normalisation.
    Train {
        size: usize,
        processor: ImageProcessor,
        augment: TrainAugment,
    },
}

impl ImageTransform {
    /// The side the model's input comes out at, for a processor with a fixed output.
    pub fn train(processor: ImageProcessor, augment: TrainAugment) -> Result<ImageTransform> {
        augment.validate()?;
        let size = match (&processor.crop, &processor.resize) {
            (Some((h, w)), _)
            | (
                None,
                Some((
                    ResizeTo::Exact {
                        height: h,
                        width: w,
                    },
                    _,
                )),
            ) if h == w => *h,
            _ => {
                return Err(Error::invalid(
                    "image_folder",
                    "training augmentation needs a processor with a square crop or exact size",
                ))
            }
        };
        Ok(ImageTransform::Train {
            size,
            processor,
            augment,
        })
    }

    fn apply(&self, img: &RgbImage, gen: &mut Generator) -> Result<Tensor> {
        match self {
            ImageTransform::Eval(p) => p.apply(img),
            ImageTransform::Train {
                size,
                processor,
                augment,
            } => {
                let crop = random_resized_crop(img, *size, augment.min_scale, gen);
                let flipped = match gen.uniform(1)[0] < augment.flip {
                    true => ::image::imageops::flip_horizontal(&crop),
                    false => crop,
                };
                let jittered = match &augment.color_jitter {
                    Some(j) => j.apply(&flipped, gen),
                    None => flipped,
                };
                let normalise_only = ImageProcessor {
                    resize: None,
                    crop: None,
                    ..processor.clone()
                };
                normalise_only.apply(&jittered)
            }
        }
    }
}

/// torchvision's `RandomResizedCrop(size, scale=(min_scale, 1.0), ratio=(3/4, 4/3))`: ten
/// tries at a box of a random area and aspect that fits, else the centre crop at the closest
/// allowed aspect; the box resized to `size` x `size` with Pillow's bilinear filter.
fn random_resized_crop(
    img: &RgbImage,
    size: usize,
    min_scale: f64,
    gen: &mut Generator,
) -> RgbImage {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let area = (w * h) as f64;
    let (lo, hi) = ((3.0f64 / 4.0).ln(), (4.0f64 / 3.0).ln());
    let mut found = None;
    for _ in 0..10 {
        let u = gen.uniform(4);
        let target = area * (min_scale + u[0] * (1.0 - min_scale));
        let aspect = (lo + u[1] * (hi - lo)).exp();
        let cw = (target * aspect).sqrt().round() as usize;
        let ch = (target / aspect).sqrt().round() as usize;
        if cw > 0 && ch > 0 && cw <= w && ch <= h {
            let top = (u[2] * (h - ch + 1) as f64) as usize;
            let left = (u[3] * (w - cw + 1) as f64) as usize;
            found = Some((left.min(w - cw), top.min(h - ch), cw, ch));
            break;
        }
    }
    let (left, top, cw, ch) = found.unwrap_or_else(|| {
        let ratio = w as f64 / h as f64;
        let (cw, ch) = if ratio < 3.0 / 4.0 {
            (w, ((w as f64) / (3.0 / 4.0)).round() as usize)
        } else if ratio > 4.0 / 3.0 {
            (((h as f64) * (4.0 / 3.0)).round() as usize, h)
        } else {
            (w, h)
        };
        let (cw, ch) = (cw.clamp(1, w), ch.clamp(1, h));
        ((w - cw) / 2, (h - ch) / 2, cw, ch)
    });
    let crop =
        ::image::imageops::crop_imm(img, left as u32, top as u32, cw as u32, ch as u32).to_image();
    resize_pil(&crop, size, size, PilFilter::Bilinear)
}

#[derive(Clone, Debug)]
pub struct ImageFolderOptions {
    pub batch_size: usize,
    pub shuffle: bool,
    pub drop_last: bool,
    pub seed: u64,
    /// Decoding threads (0: one per core, at most 8).
    pub workers: usize,
    /// MixUp / CutMix on every batch (the labels then come as class probabilities [B, C]).
    pub mix: Option<MixOptions>,
}

/// An image folder as batches: x [B, 3, H, W] (F32) and y [B] (I64 labels; with `mix`, class
/// probabilities [B, classes] (F32)).
pub struct ImageFolderBatches {
    pub folder: Arc<ImageFolder>,
    transform: Arc<ImageTransform>,
    options: ImageFolderOptions,
    epoch: u64,
}

impl ImageFolderBatches {
    pub fn new(
        folder: ImageFolder,
        transform: ImageTransform,
        options: ImageFolderOptions,
    ) -> Result<ImageFolderBatches> {
        if options.batch_size == 0 {
            return Err(Error::invalid(
                "image_folder",
                "batch_size must be positive",
            ));
        }
        Ok(ImageFolderBatches {
            folder: Arc::new(folder),
            transform: Arc::new(transform),
            options,
            epoch: 0,
        })
    }
}

impl BatchSource for ImageFolderBatches {
    fn num_batches(&self) -> usize {
        let (n, b) = (self.folder.samples.len(), self.options.batch_size);
        match self.options.drop_last {
            true => n / b,
            false => n.div_ceil(b),
        }
    }

    /// Worker threads start decoding now, a few batches ahead of the consumer.
    fn epoch(&mut self, device: Device) -> Result<Epoch> {
        let n = self.folder.samples.len();
        let epoch = self.epoch;
        self.epoch += 1;
        let order: Vec<usize> = match self.options.shuffle {
            true => Generator::new(self.options.seed ^ (epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
                .permutation(n),
            false => (0..n).collect(),
        };
        let (folder, transform) = (self.folder.clone(), self.transform.clone());
        let seed = self.options.seed;
        let order = Arc::new(order);
        let job_order = order.clone();
        let mut pool = OrderedPool::new(
            "image_folder",
            n,
            self.options.workers,
            4 * self.options.batch_size,
            move |pos| -> Result<(Tensor, usize)> {
                let (path, label) = &folder.samples[job_order[pos]];
                let img = read_rgb(path).map_err(|e| {
                    Error::invalid("image_folder", format!("{}: {e}", path.display()))
                })?;
                // The image's randomness: the seed, the epoch and its position in the epoch.
                let mut gen =
                    Generator::new(seed.wrapping_add(epoch << 32).wrapping_add(pos as u64));
                Ok((transform.apply(&img, &mut gen)?, *label))
            },
        );
        let batches = self.num_batches();
        let (bs, folder) = (self.options.batch_size, self.folder.clone());
        let (mix, mix_seed) = (
            self.options.mix,
            self.options.seed.wrapping_mul(0x2545_F491_4F6C_DD1D),
        );
        Ok(Box::new((0..batches).map(move |b| {
            let range = b * bs..((b + 1) * bs).min(n);
            let mut xs = Vec::with_capacity(range.len());
            let mut ys = Vec::with_capacity(range.len());
            let mut paths = Vec::with_capacity(range.len());
            for pos in range {
                let (x, y) = pool.take(pos)??;
                xs.push(x);
                ys.push(y as i64);
                paths.push(folder.samples[order[pos]].0.clone());
            }
            let x = Tensor::stack(&xs, 0).map_err(|e| {
                Error::invalid(
                    "image_folder",
                    format!("images of one batch came out at different sizes ({e}): give the processor a crop or an exact size"),
                )
            })?;
            let (x, y) = (x.to_device(device)?, Tensor::from_vec(ys, &[xs.len()])?.to_device(device)?);
            let (x, y) = match mix {
                // The batch's draw: the seed, the epoch and the batch's index.
                Some(m) => {
                    let mut gen = Generator::new(mix_seed ^ (epoch << 40) ^ b as u64);
                    let (x, y, _) = mix_batch(&x, &y, m, &mut gen)?;
                    (x, y)
                }
                None => (x, y),
            };
            Ok(Batch { x, y, paths })
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder_with(classes: &[(&str, usize)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (ci, (name, n)) in classes.iter().enumerate() {
            std::fs::create_dir_all(dir.path().join(name)).unwrap();
            for i in 0..*n {
                let img =
                    RgbImage::from_pixel(20 + i as u32, 16, ::image::Rgb([ci as u8 * 100, 7, 9]));
                img.save(dir.path().join(name).join(format!("{i}.png")))
                    .unwrap();
            }
        }
        dir
    }

    #[test]
    fn classes_are_sorted_subfolders_and_empty_ones_are_refused() {
        let dir = folder_with(&[("dog", 3), ("cat", 2)]);
        let f = ImageFolder::open(dir.path()).unwrap();
        assert_eq!(f.classes, ["cat", "dog"]);
        assert_eq!(f.samples.iter().filter(|s| s.1 == 1).count(), 3);
        std::fs::create_dir_all(dir.path().join("empty")).unwrap();
        let err = ImageFolder::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("empty") && err.contains("no images"), "{err}");
    }

    #[test]
    fn a_split_holds_out_part_of_every_class_and_repeats_by_seed() {
        let dir = folder_with(&[("a", 10), ("b", 4)]);
        let f = ImageFolder::open(dir.path()).unwrap();
        let (train, held) = f.split(0.25, 3).unwrap();
        assert_eq!((train.samples.len(), held.samples.len()), (10, 4));
        assert_eq!(held.samples.iter().filter(|s| s.1 == 1).count(), 1);
        assert_eq!(f.split(0.25, 3).unwrap().1.samples, held.samples);
    }

    #[test]
    fn batches_are_normalised_crops_with_labels_the_same_for_any_thread_count() {
        let dir = folder_with(&[("a", 3), ("b", 2)]);
        let f = ImageFolder::open(dir.path()).unwrap();
        let processor = ImageProcessor::from_json(&serde_json::json!({
            "size": {"height": 8, "width": 8}, "resample": 2,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]
        }))
        .unwrap();
        let run = |workers: usize| {
            let options = ImageFolderOptions {
                batch_size: 2,
                shuffle: true,
                drop_last: false,
                seed: 5,
                workers,
                mix: None,
            };
            let transform =
                ImageTransform::train(processor.clone(), TrainAugment::default()).unwrap();
            let mut b = ImageFolderBatches::new(f.clone(), transform, options).unwrap();
            assert_eq!(b.num_batches(), 3);
            b.epoch(Device::Cpu)
                .unwrap()
                .map(|b| {
                    let b = b.unwrap();
                    (
                        b.x.to_vec_f32().unwrap(),
                        b.y.to_vec::<i64>().unwrap(),
                        b.x.shape().to_vec(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let one = run(1);
        assert_eq!(one, run(3));
        assert_eq!(one[0].2, [2, 3, 8, 8]);
        let mut labels: Vec<i64> = one.iter().flat_map(|b| b.1.clone()).collect();
        labels.sort();
        assert_eq!(labels, [0, 0, 0, 1, 1]);
        // Class "b" is red 100 → (100/255 - 0.5)/0.5 in the first channel.
        let red = (100.0f32 / 255.0 - 0.5) / 0.5;
        let first = &one[0];
        for (i, &label) in first.1.iter().enumerate() {
            let want = if label == 1 { red } else { -1.0 };
            assert!((first.0[i * 3 * 64] - want).abs() < 1e-6);
        }
    }
}
