//! `data::yolo` (an ultralytics dataset's summary) and `data::yolo_shapes` (our synthetic
//! detection dataset in ultralytics' layout).

use crate::error::{guard, RhaiResult};
use crate::help::Api;
use crate::options::Options;
use rhai::{Array, Dynamic, Map, INT};
use rusting_brain::data::yolo::{generate_shapes, DataConfig, ShapesOptions, YoloDataset};

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
