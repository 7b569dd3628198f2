//! Loaded training images kept in memory, so a mosaic's other images are rarely decoded twice:
//! either every image after its first use (ultralytics' `cache="ram"`), or the most recently
//! loaded ones, first in first out (ultralytics' buffer). What the cache holds changes speed
//! only, never a sample: a miss loads the same pixels again.

use super::labels::{ImageEntry, YoloDataset};
use crate::vision::augment::TrainImage;
use crate::vision::image::read_rgb;
use crate::vision::letterbox::load_size;
use crate::vision::resize::resize_linear;
use crate::{Error, Result};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

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

pub(crate) struct ImageCache {
    imgsz: usize,
    store: Store,
}

enum Store {
    /// Every image, kept once loaded.
    All(Vec<OnceLock<Arc<TrainImage>>>),
    /// At most `capacity` images, the oldest loaded dropped first.
    Recent {
        capacity: usize,
        held: Mutex<Recent>,
    },
}

#[derive(Default)]
struct Recent {
    images: HashMap<usize, Arc<TrainImage>>,
    order: VecDeque<usize>,
}

impl ImageCache {
    /// A cache of every one of `len` images.
    pub(crate) fn all(len: usize, imgsz: usize) -> ImageCache {
        ImageCache {
            imgsz,
            store: Store::All((0..len).map(|_| OnceLock::new()).collect()),
        }
    }

    /// A cache of the `capacity` images loaded last.
    pub(crate) fn recent(capacity: usize, imgsz: usize) -> ImageCache {
        ImageCache {
            imgsz,
            store: Store::Recent {
                capacity: capacity.max(1),
                held: Mutex::new(Recent::default()),
            },
        }
    }

    /// Image `index` of `dataset`, loaded or from the cache.
    pub(crate) fn get(&self, dataset: &YoloDataset, index: usize) -> Result<Arc<TrainImage>> {
        let entry = dataset.images.get(index).ok_or_else(|| {
            Error::invalid(
                "yolo train loader",
                format!("image {index} is past the {} images", dataset.images.len()),
            )
        })?;
        match &self.store {
            Store::All(slots) => {
                let slot = &slots[index];
                if let Some(img) = slot.get() {
                    return Ok(img.clone());
                }
                // Two workers may load the same image at once; both results are identical.
                let img = Arc::new(load_train_image(entry, self.imgsz)?);
                Ok(slot.get_or_init(|| img).clone())
            }
            Store::Recent { capacity, held } => {
                if let Some(img) = lock(held).images.get(&index) {
                    return Ok(img.clone());
                }
                // Decoded without the lock held, so other workers keep going meanwhile.
                let img = Arc::new(load_train_image(entry, self.imgsz)?);
                let mut held = lock(held);
                let Recent { images, order } = &mut *held;
                if let Entry::Vacant(slot) = images.entry(index) {
                    slot.insert(img.clone());
                    order.push_back(index);
                    while order.len() > *capacity {
                        if let Some(old) = order.pop_front() {
                            images.remove(&old);
                        }
                    }
                }
                Ok(img)
            }
        }
    }

    /// How many images are held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        match &self.store {
            Store::All(slots) => slots.iter().filter(|s| s.get().is_some()).count(),
            Store::Recent { held, .. } => lock(held).images.len(),
        }
    }
}

/// The lock, even if a worker panicked while holding it (the map stays consistent: every
/// change is one insert or remove).
fn lock(m: &Mutex<Recent>) -> std::sync::MutexGuard<'_, Recent> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::yolo::{generate_shapes, DataConfig, ShapesOptions};

    fn dataset(dir: &std::path::Path) -> YoloDataset {
        let opts = ShapesOptions {
            train: 4,
            val: 0,
            imgsz: 64,
            ..Default::default()
        };
        let yaml = generate_shapes(dir, &opts).unwrap();
        YoloDataset::load(&DataConfig::load(&yaml).unwrap(), "train").unwrap()
    }

    #[test]
    fn recent_cache_keeps_only_the_last_loaded_images() {
        let dir = tempfile::tempdir().unwrap();
        let ds = dataset(dir.path());
        let cache = ImageCache::recent(2, 48);
        let first = cache.get(&ds, 0).unwrap();
        assert_eq!(first.image.width().max(first.image.height()), 48);
        cache.get(&ds, 1).unwrap();
        cache.get(&ds, 2).unwrap();
        assert_eq!(cache.held(), 2);
        // Image 0 was dropped: loaded again, the same.
        let again = cache.get(&ds, 0).unwrap();
        assert!(!Arc::ptr_eq(&first, &again) && *first == *again);
        assert!(cache.get(&ds, 9).is_err());
    }

    #[test]
    fn full_cache_keeps_every_image_loaded_once() {
        let dir = tempfile::tempdir().unwrap();
        let ds = dataset(dir.path());
        let cache = ImageCache::all(ds.images.len(), 64);
        let first = cache.get(&ds, 3).unwrap();
        cache.get(&ds, 1).unwrap();
        assert_eq!(cache.held(), 2);
        assert!(Arc::ptr_eq(&first, &cache.get(&ds, 3).unwrap()));
    }
}
