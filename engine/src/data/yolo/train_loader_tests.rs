//! Tests of the training loader on a generated shapes dataset: reproducibility across runs and
//! thread counts, the epoch order, close_mosaic, and the collated layout.

use super::train_loader::{TrainBatch, TrainLoader, TrainLoaderOptions};
use super::{generate_shapes, DataConfig, ShapesOptions, YoloDataset};
use crate::vision::augment::AugmentConfig;
use crate::DType;
use std::sync::Arc;

/// A generated train split of `n` images at 96 pixels, loaded.
fn shapes(n: usize) -> (tempfile::TempDir, Arc<YoloDataset>) {
    let dir = tempfile::tempdir().unwrap();
    let opts = ShapesOptions {
        train: n,
        val: 0,
        imgsz: 96,
        seed: 3,
        ..Default::default()
    };
    let yaml = generate_shapes(dir.path(), &opts).unwrap();
    let ds = YoloDataset::load(&DataConfig::load(&yaml).unwrap(), "train").unwrap();
    (dir, Arc::new(ds))
}

fn options(batch_size: usize, workers: usize) -> TrainLoaderOptions {
    TrainLoaderOptions {
        batch_size,
        workers,
        seed: 11,
        epochs: 4,
        close_mosaic: 2,
        augment: AugmentConfig {
            imgsz: 64,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Everything a batch carries, as plain vectors to compare.
fn contents(b: &TrainBatch) -> (Vec<u8>, Vec<f32>, Vec<usize>) {
    let targets = b.targets().unwrap().to_vec::<f32>().unwrap();
    (b.images.to_vec::<u8>().unwrap(), targets, b.indices.clone())
}

fn epoch(loader: &TrainLoader, e: usize) -> Vec<(Vec<u8>, Vec<f32>, Vec<usize>)> {
    loader.epoch(e).map(|b| contents(&b.unwrap())).collect()
}

#[test]
fn batches_are_identical_for_any_worker_count() {
    let (_dir, ds) = shapes(10);
    let one = epoch(&TrainLoader::new(ds.clone(), options(4, 1)).unwrap(), 1);
    let four = epoch(&TrainLoader::new(ds.clone(), options(4, 4)).unwrap(), 1);
    let three = epoch(&TrainLoader::new(ds, options(4, 3)).unwrap(), 1);
    assert_eq!(one, four);
    assert_eq!(one, three);
}

#[test]
fn the_seed_decides_the_batches() {
    let (_dir, ds) = shapes(6);
    let a = epoch(&TrainLoader::new(ds.clone(), options(3, 2)).unwrap(), 0);
    let again = epoch(&TrainLoader::new(ds.clone(), options(3, 2)).unwrap(), 0);
    let other_seed = TrainLoaderOptions {
        seed: 12,
        ..options(3, 2)
    };
    let b = epoch(&TrainLoader::new(ds, other_seed).unwrap(), 0);
    assert_eq!(a, again);
    assert_ne!(a, b);
}

#[test]
fn a_sample_does_not_depend_on_the_batch_it_lands_in() {
    let (_dir, ds) = shapes(7);
    let loader = TrainLoader::new(ds, options(3, 2)).unwrap();
    let batches: Vec<TrainBatch> = loader.epoch(0).map(|b| b.unwrap()).collect();
    let b = &batches[1];
    let alone = loader.sample(0, b.indices[2]).unwrap();
    let images = b.images.to_vec::<u8>().unwrap();
    let plane = 64 * 64;
    let chw = &images[2 * 3 * plane..3 * 3 * plane];
    for (i, px) in alone.image.as_raw().chunks_exact(3).enumerate() {
        assert_eq!(
            [chw[i], chw[plane + i], chw[2 * plane + i]],
            [px[0], px[1], px[2]]
        );
    }
}

#[test]
fn each_epoch_serves_every_image_once_in_its_own_order() {
    let (_dir, ds) = shapes(9);
    let loader = TrainLoader::new(ds, options(4, 2)).unwrap();
    let orders: Vec<Vec<usize>> = (0..3).map(|e| loader.epoch_order(e)).collect();
    for order in &orders {
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..9).collect::<Vec<_>>());
    }
    assert_ne!(orders[0], orders[1]);
    assert_eq!(orders[2], loader.epoch_order(2));
    let unshuffled = TrainLoader::new(
        loader_dataset(&loader),
        TrainLoaderOptions {
            shuffle: false,
            ..options(4, 2)
        },
    )
    .unwrap();
    assert_eq!(unshuffled.epoch_order(5), (0..9).collect::<Vec<_>>());
}

fn loader_dataset(loader: &TrainLoader) -> Arc<YoloDataset> {
    loader.dataset().clone()
}

#[test]
fn close_mosaic_turns_the_mosaic_off_for_the_last_epochs() {
    let (_dir, ds) = shapes(5);
    // 4 epochs, close_mosaic 2: epochs 0 and 1 mosaic, 2 and 3 not.
    let loader = TrainLoader::new(ds.clone(), options(2, 1)).unwrap();
    let on: Vec<bool> = (0..4).map(|e| loader.mosaic_enabled(e)).collect();
    assert_eq!(on, [true, true, false, false]);
    for index in 0..5 {
        assert!(loader.draws(1, index).unwrap().mosaic.is_some());
        assert!(loader.draws(2, index).unwrap().mosaic.is_none());
    }
    let never = TrainLoader::new(
        ds,
        TrainLoaderOptions {
            close_mosaic: 0,
            ..options(2, 1)
        },
    )
    .unwrap();
    assert!((0..4).all(|e| never.mosaic_enabled(e)));
}

#[test]
fn batches_follow_ultralytics_collate() {
    let (_dir, ds) = shapes(10);
    let loader = TrainLoader::new(ds, options(4, 2)).unwrap();
    assert_eq!(loader.batches_per_epoch(), 3);
    let batches: Vec<TrainBatch> = loader.epoch(0).map(|b| b.unwrap()).collect();
    // ultralytics keeps the short last batch.
    let sizes: Vec<usize> = batches.iter().map(|b| b.images.dims()[0]).collect();
    assert_eq!(sizes, [4, 4, 2]);
    for b in &batches {
        assert_eq!(b.images.dtype(), DType::U8);
        assert_eq!(&b.images.dims()[1..], [3, 64, 64]);
        let n = b.batch_idx.dims()[0];
        assert_eq!((b.cls.dims(), b.bboxes.dims()), (&[n, 1][..], &[n, 4][..]));
        let idx = b.batch_idx.to_vec::<f32>().unwrap();
        // Rows are grouped by image, in batch order.
        assert!(idx.windows(2).all(|w| w[0] <= w[1]));
        assert!(idx.iter().all(|&i| (i as usize) < b.indices.len()));
        for xywh in b.bboxes.to_vec::<f32>().unwrap().chunks(4) {
            assert!(xywh.iter().all(|&v| (0.0..=1.0).contains(&v)), "{xywh:?}");
        }
        let targets = b.targets().unwrap();
        assert_eq!(targets.dims(), [n, 6]);
    }
    assert!(batches.iter().any(|b| b.batch_idx.dims()[0] > 0));
}

#[test]
fn drop_last_leaves_out_the_short_batch() {
    let (_dir, ds) = shapes(10);
    let opts = TrainLoaderOptions {
        drop_last: true,
        ..options(4, 2)
    };
    let loader = TrainLoader::new(ds, opts).unwrap();
    assert_eq!(loader.batches_per_epoch(), 2);
    assert_eq!(loader.epoch(0).count(), 2);
}

#[test]
fn batch_size_is_capped_at_the_dataset_size() {
    let (_dir, ds) = shapes(3);
    let loader = TrainLoader::new(ds, options(16, 2)).unwrap();
    assert_eq!(loader.batch_size(), 3);
    let batches: Vec<TrainBatch> = loader.epoch(0).map(|b| b.unwrap()).collect();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].images.dims()[0], 3);
}

#[test]
fn images_held_in_memory_change_no_sample() {
    // The second pass through an epoch finds its images already decoded.
    for cache in [false, true] {
        let (_dir, ds) = shapes(5);
        let opts = TrainLoaderOptions {
            cache,
            ..options(2, 2)
        };
        let loader = TrainLoader::new(ds, opts).unwrap();
        let first = epoch(&loader, 0);
        assert_eq!(epoch(&loader, 0), first, "cache {cache}");
    }
}

#[test]
fn mosaic_partners_are_images_served_just_before() {
    let (_dir, ds) = shapes(40);
    // Batch 2: a window of 16 images.
    let loader = TrainLoader::new(ds, options(2, 1)).unwrap();
    for e in 0..2 {
        let order = loader.epoch_order(e);
        let previous = if e == 0 {
            vec![]
        } else {
            loader.epoch_order(e - 1)
        };
        for (p, &index) in order.iter().enumerate() {
            let recent: Vec<usize> = previous.iter().chain(&order[..=p]).copied().collect();
            let window = &recent[recent.len().saturating_sub(16)..];
            let others = loader.draws(e, index).unwrap().mosaic.unwrap().others;
            assert!(
                others.iter().all(|o| window.contains(o)),
                "epoch {e} position {p}"
            );
        }
    }
    // The very first sample can only be a mosaic of itself, as in ultralytics.
    let first = loader.epoch_order(0)[0];
    assert_eq!(
        loader.draws(0, first).unwrap().mosaic.unwrap().others,
        [first; 3]
    );
}

#[test]
fn with_cache_mosaic_partners_come_from_the_whole_dataset() {
    let (_dir, ds) = shapes(40);
    let opts = TrainLoaderOptions {
        cache: true,
        ..options(2, 1)
    };
    let loader = TrainLoader::new(ds, opts).unwrap();
    let order = loader.epoch_order(0);
    let later: usize = order[..4]
        .iter()
        .map(|&i| {
            let others = loader.draws(0, i).unwrap().mosaic.unwrap().others;
            others.iter().filter(|o| !order[..4].contains(o)).count()
        })
        .sum();
    assert!(
        later > 0,
        "the first samples only drew images served before them"
    );
}

#[test]
fn an_unreadable_image_is_an_error_in_its_batch() {
    let (dir, ds) = shapes(4);
    let loader = TrainLoader::new(ds.clone(), options(4, 2)).unwrap();
    std::fs::write(&ds.images[2].path, b"not an image").unwrap();
    let results: Vec<_> = loader.epoch(2).collect();
    assert_eq!(results.len(), 1);
    let err = results[0].as_ref().unwrap_err().to_string();
    assert!(err.contains("decode"), "{err}");
    drop(dir);
}

#[test]
fn bad_options_are_errors() {
    let (_dir, ds) = shapes(2);
    assert!(TrainLoader::new(ds.clone(), options(0, 1)).is_err());
    let mut opts = options(2, 1);
    opts.augment.perspective = 0.001;
    let err = TrainLoader::new(ds, opts).err().unwrap().to_string();
    assert!(err.contains("perspective"), "{err}");
}
