//! The YOLO training loader alone (no model): images per second through decode, mosaic,
//! affine, HSV, flip and collate, on a generated shapes dataset of 640-pixel JPEGs (or
//! `--data path/to/data.yaml`), printed as JSON lines:
//! - `stage`: single-thread milliseconds per image of each step (decode + resize, mosaic
//!   layout and boxes, warp (which reads the mosaic's tiles in place), HSV; the last two the
//!   best of three runs on cached data), from a few samples;
//! - `epoch`: images/s of whole epochs with mosaic (recent-image cache), with mosaic closed,
//!   and with every image held in memory (`cache`, second epoch: no decoding).
//!
//! cargo build --release -p rb_benches --bin yolo_loader_bench
//! target/release/yolo_loader_bench --images 256 --imgsz 640 --batch 16 --workers 0

use rusting_brain::data::yolo::{
    generate_shapes, load_train_image, DataConfig, ShapesOptions, TrainLoader, TrainLoaderOptions,
    YoloDataset,
};
use rusting_brain::vision::augment::{
    apply_hsv, mosaic4_canvas, random_affine_from, AugmentConfig, MosaicDraw, SampleDraws,
};
use rusting_brain::vision::augment::{sample_generator, Partners};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn num(name: &str, default: usize) -> usize {
    arg(name, &default.to_string()).parse().unwrap_or(default)
}

fn main() -> rusting_brain::Result<()> {
    let imgsz = num("--imgsz", 640);
    let batch = num("--batch", 16);
    let workers = num("--workers", 0);
    let tmp = std::env::temp_dir().join(format!("rb-yolo-loader-bench-{}", std::process::id()));
    let yaml = match std::env::args().position(|a| a == "--data") {
        Some(_) => arg("--data", "").into(),
        None => {
            let opts = ShapesOptions {
                train: num("--images", 256),
                val: 0,
                imgsz,
                seed: 1,
                ..Default::default()
            };
            generate_shapes(&tmp, &opts)?
        }
    };
    let dataset = Arc::new(YoloDataset::load(&DataConfig::load(&yaml)?, "train")?);
    let n = dataset.images.len();
    stages(&dataset, imgsz)?;
    let base = TrainLoaderOptions {
        batch_size: batch,
        workers,
        seed: 0,
        epochs: 2,
        close_mosaic: 1,
        augment: AugmentConfig {
            imgsz,
            ..Default::default()
        },
        ..Default::default()
    };
    let loader = TrainLoader::new(dataset.clone(), base.clone())?;
    for (mode, epoch) in [("mosaic", 0), ("closed_mosaic", 1)] {
        let rate = epoch_rate(&loader, epoch, n)?;
        println!(
            "{}",
            json!({"bench": "epoch", "mode": mode, "images": n, "imgsz": imgsz, "batch": batch, "workers": workers, "images_per_s": rate})
        );
    }
    let cached = TrainLoader::new(
        dataset.clone(),
        TrainLoaderOptions {
            cache: true,
            ..base
        },
    )?;
    epoch_rate(&cached, 0, n)?;
    let rate = epoch_rate(&cached, 0, n)?;
    println!(
        "{}",
        json!({"bench": "epoch", "mode": "mosaic_all_in_memory", "images": n, "imgsz": imgsz, "batch": batch, "workers": workers, "images_per_s": rate})
    );
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

/// Images per second of one whole epoch.
fn epoch_rate(loader: &TrainLoader, epoch: usize, n: usize) -> rusting_brain::Result<f64> {
    let t = Instant::now();
    for batch in loader.epoch(epoch) {
        batch?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Single-thread time of each step, averaged over a few samples.
fn stages(dataset: &YoloDataset, imgsz: usize) -> rusting_brain::Result<()> {
    let samples = dataset.images.len().min(16);
    let config = AugmentConfig {
        imgsz,
        ..Default::default()
    };
    let (mut load, mut mosaic, mut warp, mut hsv) = (0.0, 0.0, 0.0, 0.0);
    for i in 0..samples {
        let t = Instant::now();
        let tiles: Vec<_> = (0..4)
            .map(|k| load_train_image(&dataset.images[(i + k) % dataset.images.len()], imgsz))
            .collect::<rusting_brain::Result<_>>()?;
        load += t.elapsed().as_secs_f64() / 4.0;
        let draws = SampleDraws::draw(
            &config,
            true,
            Partners::Any(dataset.images.len()),
            &mut sample_generator(0, 0, i as u64),
        )?;
        let center = draws.mosaic.map_or((imgsz, imgsz), |m| m.center);
        let m = MosaicDraw {
            center,
            others: [0; 3],
        };
        let t = Instant::now();
        // The pipeline's mosaic: the layout and boxes; the warp reads the tiles in place.
        let (canvas, classes, boxes) =
            mosaic4_canvas([&tiles[0], &tiles[1], &tiles[2], &tiles[3]], imgsz, &m)?;
        mosaic += t.elapsed().as_secs_f64();
        // Steps on data already in cache: the best of three.
        let best = |f: &mut dyn FnMut()| {
            (0..3)
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        let affine = || random_affine_from(&canvas, &classes, &boxes, &draws.affine, imgsz, imgsz);
        let mut warped = affine();
        warp += best(&mut || warped = affine());
        let image = warped.image.clone();
        hsv += best(&mut || apply_hsv(&mut image.clone(), draws.hsv_gains));
    }
    let ms = |s: f64| s * 1e3 / samples as f64;
    println!(
        "{}",
        json!({"bench": "stage", "imgsz": imgsz, "samples": samples,
               "load_ms": ms(load), "mosaic_ms": ms(mosaic), "warp_ms": ms(warp), "hsv_ms": ms(hsv)})
    );
    Ok(())
}
