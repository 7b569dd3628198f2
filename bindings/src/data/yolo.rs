//! `data::yolo` (an ultralytics dataset's summary), `data::yolo_images` (one split as a
//! dataset a `loader` iterates) and `data::yolo_shapes` (our synthetic detection dataset in
//! ultralytics' layout).

use super::loader::{Batch, Loader, Source};
use crate::error::{guard, RhaiResult};
use crate::help::Api;
use crate::options::Options;
use rhai::{Array, Dynamic, Engine, Map, INT};
use rusting_brain::data::yolo::{
    generate_shapes, DataConfig, ShapesOptions, ValLoader, ValLoaderOptions, YoloBatch, YoloBox,
    YoloDataset,
};
use rusting_brain::vision::RatioPad;
use rusting_brain::{DType, Device, Generator, Tensor};
use std::sync::Arc;

/// One split of a detection dataset as a script value (`data::yolo_images`).
pub type ImageDataset = Arc<YoloDataset>;

/// What an image loader draws its epochs from: the split, the loader's options and, when
/// shuffling, the generator each epoch's order comes from.
pub struct ImageSource {
    dataset: ImageDataset,
    options: ValLoaderOptions,
    shuffle: Option<Generator>,
}

impl ImageSource {
    pub fn num_batches(&self) -> usize {
        let (n, b) = (self.dataset.images.len(), self.options.batch_size);
        if self.options.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        }
    }

    /// The next epoch: worker threads start decoding now, a few batches ahead of the loop.
    pub fn epoch(&mut self) -> RhaiResult<ValLoader> {
        let mut options = self.options.clone();
        if let Some(g) = &mut self.shuffle {
            options.order = Some(g.permutation(self.dataset.images.len()));
        }
        guard(|| ValLoader::new(self.dataset.clone(), &options))
    }
}

fn image_loader(ds: &mut ImageDataset, opts: Map) -> RhaiResult<Loader> {
    let o = Options::new(
        "loader",
        opts,
        &[
            "batch_size",
            "imgsz",
            "shuffle",
            "seed",
            "drop_last",
            "rect",
            "workers",
        ],
    )?;
    let d = ValLoaderOptions::default();
    let options = ValLoaderOptions {
        batch_size: o.usize("batch_size", d.batch_size)?,
        imgsz: o.usize("imgsz", d.imgsz)?,
        rect: o.bool("rect", false)?,
        workers: o.usize("workers", d.workers)?,
        drop_last: o.bool("drop_last", false)?,
        ..d
    };
    let shuffle = o
        .bool("shuffle", false)?
        .then(|| o.int("seed", 0).map(|s| Generator::new(s as u64)))
        .transpose()?;
    if shuffle.is_some() && options.rect {
        return Err(crate::error::runtime_error(
            "loader: shuffle and rect cannot be combined (rect batches follow the aspect ratios)",
        ));
    }
    if options.batch_size == 0 || options.imgsz == 0 {
        return Err(crate::error::runtime_error(
            "loader: batch_size and imgsz must be at least 1",
        ));
    }
    Ok(Loader::new(Source::Images(ImageSource {
        dataset: ds.clone(),
        options,
        shuffle,
    })))
}

/// Boxes normalised to each original image, as `[n, 6]` rows of (image in batch, class, cx,
/// cy, w, h) normalised to the letterboxed canvas `(h, w)` the image was placed on, the layout
/// of ultralytics' training batches.
pub fn canvas_labels(
    labels: &[Vec<YoloBox>],
    placement: &[RatioPad],
    canvas_hw: (usize, usize),
) -> Vec<f32> {
    let (ch, cw) = (canvas_hw.0 as f64, canvas_hw.1 as f64);
    let mut rows = Vec::new();
    for (k, (boxes, rp)) in labels.iter().zip(placement).enumerate() {
        let (h0, w0) = (rp.orig_hw.0 as f64, rp.orig_hw.1 as f64);
        let (gy, gx) = rp.gain_hw;
        let (px, py) = rp.pad_xy;
        for b in boxes {
            let [cx, cy, w, h] = b.xywh.map(f64::from);
            rows.extend(
                [
                    k as f64,
                    b.class as f64,
                    (cx * w0 * gx + px) / cw,
                    (cy * h0 * gy + py) / ch,
                    w * w0 * gx / cw,
                    h * h0 * gy / ch,
                ]
                .map(|v| v as f32),
            );
        }
    }
    rows
}

/// A loader's image batch as the script sees it: images in [0, 1] and boxes on the device.
pub fn image_batch(batch: rusting_brain::Result<YoloBatch>, device: Device) -> RhaiResult<Batch> {
    guard(|| {
        let b = batch?;
        let dims = b.images.dims().to_vec();
        let rows = canvas_labels(&b.labels, &b.ratio_pad, (dims[2], dims[3]));
        let n = rows.len() / 6;
        let x = b
            .images
            .to_device(device)?
            .to(device, DType::F32)?
            .mul_scalar(1.0 / 255.0)?;
        let y = Tensor::from_vec(rows, &[n, 6])?.to_device(device)?;
        let paths = b
            .paths
            .iter()
            .map(|p| Dynamic::from(p.display().to_string()))
            .collect();
        Ok(Batch {
            x,
            y,
            paths: Some(paths),
        })
    })
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

fn shapes(dir: &str, opts: Map) -> RhaiResult<String> {
    let o = Options::new(
        "data::yolo_shapes",
        opts,
        &["train", "val", "imgsz", "seed"],
    )?;
    let d = ShapesOptions::default();
    let so = ShapesOptions {
        train: o.usize("train", d.train)?,
        val: o.usize("val", d.val)?,
        imgsz: o.usize("imgsz", d.imgsz)?,
        seed: o.int("seed", d.seed as INT)? as u64,
        classes: d.classes,
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
