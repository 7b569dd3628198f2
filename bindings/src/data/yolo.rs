//! `data::yolo` (an ultralytics dataset's summary), `data::yolo_images` (one split as a
//! dataset a `loader` iterates) and `data::yolo_shapes` (our synthetic detection dataset in
//! ultralytics' layout).

use super::loader::Loader;
use crate::error::{guard, RhaiResult};
use crate::help::Api;
use rhai::{Array, Dynamic, Engine, Map, INT};
use rusting_brain::data::yolo::{
    generate_shapes, DataConfig, ImageBatches, ShapesOptions, ValLoaderOptions, YoloDataset,
};
use rusting_brain::Generator;
use std::sync::Arc;

/// One split of a detection dataset as a script value (`data::yolo_images`).
pub type ImageDataset = Arc<YoloDataset>;

crate::options! {
    struct ImageLoaderOptions {
        batch_size: usize = ValLoaderOptions::default().batch_size,
        imgsz: usize = ValLoaderOptions::default().imgsz,
        shuffle: bool = false,
        seed: INT = 0,
        drop_last: bool = false,
        rect: bool = false,
        workers: usize = ValLoaderOptions::default().workers,
    }
}

fn image_loader(ds: &mut ImageDataset, opts: Map) -> RhaiResult<Loader> {
    let o = ImageLoaderOptions::parse("loader", opts)?;
    let options = ValLoaderOptions {
        batch_size: o.batch_size,
        imgsz: o.imgsz,
        rect: o.rect,
        workers: o.workers,
        drop_last: o.drop_last,
        ..ValLoaderOptions::default()
    };
    let shuffle = o.shuffle.then(|| Generator::new(o.seed as u64));
    guard(|| ImageBatches::new(ds.clone(), options, shuffle)).map(Loader::new)
}

fn images(path: &str, split: &str) -> RhaiResult<ImageDataset> {
    guard(|| {
        let config = DataConfig::load(path)?;
        let ds = YoloDataset::load(&config, split)?;
        for w in &ds.warnings {
            rusting_brain::messages::warn(w);
        }
        Ok(Arc::new(ds))
    })
}

/// Registers the `YoloDataset` type and its getters.
pub fn register_types(engine: &mut Engine) {
    engine.register_type_with_name::<ImageDataset>("YoloDataset");
    engine.register_get("num_classes", |d: &mut ImageDataset| d.names.len() as INT);
    engine.register_get("classes", |d: &mut ImageDataset| -> Array {
        d.names.iter().map(|n| Dynamic::from(n.clone())).collect()
    });
}

fn summary(path: &str) -> RhaiResult<Map> {
    guard(|| {
        let config = DataConfig::load(path)?;
        let mut out = Map::new();
        out.insert("file".into(), config.file.display().to_string().into());
        let names: Array = config
            .names
            .iter()
            .map(|n| Dynamic::from(n.clone()))
            .collect();
        out.insert("names".into(), names.into());
        let mut warnings = Array::new();
        for split in ["train", "val"] {
            let ds = YoloDataset::load(&config, split)?;
            let boxes: usize = ds.images.iter().map(|i| i.labels.len()).sum();
            let mut s = Map::new();
            s.insert("images".into(), Dynamic::from_int(ds.images.len() as INT));
            s.insert("instances".into(), Dynamic::from_int(boxes as INT));
            s.insert("summary".into(), ds.summary().into());
            out.insert(split.into(), s.into());
            warnings.extend(ds.warnings.into_iter().map(Dynamic::from));
        }
        out.insert("warnings".into(), warnings.into());
        Ok(out)
    })
}

crate::options! {
    struct ShapesOpts {
        train: usize = ShapesOptions::default().train,
        val: usize = ShapesOptions::default().val,
        imgsz: usize = ShapesOptions::default().imgsz,
        seed: INT = ShapesOptions::default().seed as INT,
    }
}

fn shapes(dir: &str, opts: Map) -> RhaiResult<String> {
    let o = ShapesOpts::parse("data::yolo_shapes", opts)?;
    let so = ShapesOptions {
        train: o.train,
        val: o.val,
        imgsz: o.imgsz,
        seed: o.seed as u64,
        ..ShapesOptions::default()
    };
    guard(|| generate_shapes(dir, &so)).map(|p| p.display().to_string())
}

pub fn register(api: &mut Api) {
    api.func(
        "yolo_images",
        "data::yolo_images(data_yaml, split) -> YoloDataset",
        "One split (\"train\", \"val\" or \"test\") of an ultralytics dataset as a dataset to iterate: ds.len(), ds.classes, ds.loader(#{ batch_size, imgsz, shuffle, seed, drop_last, rect, workers }) (images dropped for corrupt files or bad labels are named in warnings).",
        "let path = data::yolo_shapes(\"shapes\", #{ train: 4, val: 2, imgsz: 64 }); let ds = data::yolo_images(path, \"train\"); for b in ds.loader(#{ batch_size: 2, imgsz: 64, shuffle: true }) { print(b.x.shape); }",
        images,
    );
    api.method(
        "len",
        "ds.len() -> int",
        "The number of images.",
        "let path = data::yolo_shapes(\"shapes\", #{ train: 4, val: 2, imgsz: 64 }); print(data::yolo_images(path, \"val\").len())",
        |d: &mut ImageDataset| d.images.len() as INT,
    );
    api.method(
        "loader",
        "ds.loader(#{ batch_size, imgsz, shuffle, seed, drop_last, rect, workers }) -> Loader",
        "Lazy batches of a detection split, decoded and letterboxed on worker threads: batch.x [B, 3, imgsz, imgsz] in [0, 1], batch.y [n, 6] boxes, batch.paths.",
        "let path = data::yolo_shapes(\"shapes\", #{ train: 4, val: 2, imgsz: 64 }); let ds = data::yolo_images(path, \"train\"); let n = 0; for b in ds.loader(#{ batch_size: 2, imgsz: 64, drop_last: true }) { n += 1; } print(n);",
        image_loader,
    );
    api.func(
        "yolo",
        "data::yolo(data_yaml) -> map",
        "Reads an ultralytics dataset (data.yaml with path, train, val, names): #{ file, names, train: #{ images, instances, summary }, val: ..., warnings } (images dropped for corrupt files or bad label lines are named in warnings).",
        "let path = data::yolo_shapes(\"shapes\", #{ train: 2, val: 2, imgsz: 64 }); let d = data::yolo(path); print(d.val.images);",
        summary,
    );
    api.func(
        "yolo_shapes",
        "data::yolo_shapes(dir, #{ train, val, imgsz, seed }) -> string",
        "Writes a synthetic detection dataset (shapes of 6 classes on textured backgrounds, exact boxes) in ultralytics' layout under dir; returns its data.yaml path. The same seed gives the same files.",
        "let path = data::yolo_shapes(\"shapes\", #{ train: 8, val: 4, imgsz: 96, seed: 1 });",
        shapes,
    );
}
