//! Throughput of the YOLO validation input path on ultralytics' sample images (bus.jpg,
//! zidane.jpg), one thread against the loader's pool, and of the shapes generator. Ignored by
//! default: `cargo test -p rb_integration_tests --test yolo_loader_bench -- --ignored --nocapture`.

use rb_integration_tests::assets::asset;
use rusting_brain::data::yolo::{
    generate_shapes, ShapesOptions, ValLoader, ValLoaderOptions, YoloDataset,
};
use rusting_brain::vision::{image::read_rgb, preprocess_val};
use std::sync::Arc;
use std::time::Instant;

#[test]
#[ignore]
fn decode_and_letterbox_throughput() {
    let (Some(bus), Some(zidane)) = (
        asset("yolo_loader_bench", "ultralytics/assets/bus.jpg"),
        asset("yolo_loader_bench", "ultralytics/assets/zidane.jpg"),
    ) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("rb_yolo_bench_{}", std::process::id()));
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    let n = 64;
    for i in 0..n {
        let src = if i % 2 == 0 { &bus } else { &zidane };
        std::fs::copy(src, images.join(format!("{i:03}.jpg"))).unwrap();
    }
    let ds =
        Arc::new(YoloDataset::from_paths(std::slice::from_ref(&images), vec!["x".into()]).unwrap());

    let t = Instant::now();
    for e in &ds.images {
        let img = read_rgb(&e.path).unwrap();
        std::hint::black_box(preprocess_val(&img, 640, None));
    }
    let single = n as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for e in &ds.images {
        std::hint::black_box(read_rgb(&e.path).unwrap());
    }
    let decode_only = n as f64 / t.elapsed().as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let mut counts = vec![1, 2, 4, 8, cores];
    counts.retain(|&w| w <= cores);
    counts.dedup();
    for workers in counts {
        let opts = ValLoaderOptions {
            batch_size: 16,
            imgsz: 640,
            workers,
            ..Default::default()
        };
        let t = Instant::now();
        let count: usize = ValLoader::new(ds.clone(), &opts)
            .unwrap()
            .map(|b| b.unwrap().indices.len())
            .sum();
        assert_eq!(count, n);
        let rate = n as f64 / t.elapsed().as_secs_f64();
        eprintln!(
            "loader, {workers} worker(s): {rate:.1} images/s (rect batches of 16, imgsz 640)"
        );
    }
    eprintln!("one thread: decode {decode_only:.1} images/s, decode + letterbox {single:.1} images/s ({cores} cores)");

    let t = Instant::now();
    let opts = ShapesOptions {
        train: 240,
        val: 60,
        imgsz: 320,
        seed: 1,
        ..Default::default()
    };
    generate_shapes(dir.join("shapes"), &opts).unwrap();
    eprintln!(
        "generate_shapes: 300 images at 320 in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
