//! The YOLO detector as a Rhai value, and the conversions of its results into script maps.

use crate::error::{guard, runtime_error, RhaiResult};
use rhai::{Array, Dynamic, Map, FLOAT, INT};
use rusting_brain::data::yolo::DataConfig;
use rusting_brain::models::yolo::predict::{Detection, PredictOptions};
use rusting_brain::models::yolo::val::{validate, ValOptions, ValReport};
use rusting_brain::models::yolo::{PtMeta, YoloConfig, YoloModel};
use rusting_brain::nn::Module;
use rusting_brain::vision::RgbImage;
use rusting_brain::{Generator, Tensor};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Clone)]
pub struct Yolo(Arc<Mutex<YoloModel>>);

impl Yolo {
    pub fn new(model: YoloModel) -> RhaiResult<Self> {
        let device = crate::tensor::default_device();
        guard(|| model.to_device(device))?;
        Ok(Yolo(Arc::new(Mutex::new(model))))
    }

    /// A handle on a model that already lives where it should (a trainer's).
    pub fn from_shared(model: Arc<Mutex<YoloModel>>) -> Self {
        Yolo(model)
    }

    /// The shared model itself, for an engine object that works on it in place.
    pub fn shared(&self) -> Arc<Mutex<YoloModel>> {
        self.0.clone()
    }

    pub fn lock(&self) -> MutexGuard<'_, YoloModel> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `yolo::load(path)`: `.pt`, `.safetensors`, `.onnx` or a model YAML.
pub fn load(path: &str) -> RhaiResult<Yolo> {
    Yolo::new(guard(|| YoloModel::load(Path::new(path)))?)
}

crate::options! {
    struct SavePtOptions {
        epoch: INT = -1,
        best_fitness: f64,
        imgsz: usize,
        data: String,
    }
}

/// `model.save_pt(path, #{ epoch, best_fitness, imgsz, data })`: an ultralytics checkpoint.
pub fn save_pt(m: &mut Yolo, path: &str, opts: Map) -> RhaiResult<String> {
    let o = SavePtOptions::parse("save_pt", opts)?;
    let mut meta = PtMeta {
        epoch: o.epoch,
        best_fitness: o.best_fitness,
        ..PtMeta::default()
    };
    if let Some(imgsz) = o.imgsz {
        meta.train_args.insert("imgsz".into(), imgsz.into());
    }
    if let Some(data) = o.data {
        meta.train_args.insert("data".into(), data.into());
    }
    guard(|| m.lock().save_ultralytics_pt(Path::new(path), &meta))?;
    Ok(path.to_string())
}

crate::options! {
    struct FreshOptions {
        /// A count or an array of names.
        classes: Dynamic,
        seed: INT = 0,
    }
}

/// `yolo::model(yaml, #{ classes, seed })`: a fresh network; `classes` is a count or names.
pub fn fresh(yaml: &str, opts: Map) -> RhaiResult<Yolo> {
    let o = FreshOptions::parse("yolo::model", opts)?;
    let names: Vec<String> = match &o.classes {
        None => Vec::new(),
        Some(v) if v.is_int() => {
            let n = crate::convert::usize_of(v.as_int().unwrap_or(0), "yolo::model classes")?;
            (0..n).map(|i| format!("class{i}")).collect()
        }
        Some(v) if v.is_array() => v
            .clone()
            .into_array()
            .unwrap_or_default()
            .into_iter()
            .map(|n| {
                n.into_string().map_err(|_| {
                    runtime_error("yolo::model: classes must be a count or an array of names")
                })
            })
            .collect::<RhaiResult<_>>()?,
        Some(_) => {
            return Err(runtime_error(
                "yolo::model: classes must be a count or an array of names",
            ))
        }
    };
    let nc = (!names.is_empty()).then_some(names.len());
    let seed = o.seed as u64;
    let model = guard(|| {
        let cfg = YoloConfig::from_file(Path::new(yaml), nc)?;
        let mut m = YoloModel::build(&cfg, names, false, &mut Generator::new(seed))?;
        m.eval();
        Ok(m)
    })?;
    Yolo::new(model)
}

crate::options! {
    /// model.val's options; `data` is required, the rest default to ValOptions'.
    struct ValOpts {
        data: String,
        imgsz: usize = ValOptions::default().imgsz,
        batch: usize = ValOptions::default().batch,
        conf: f64 = ValOptions::default().conf,
        iou: f64 = ValOptions::default().iou,
        half: bool = ValOptions::default().half,
        rect: bool = ValOptions::default().rect,
        split: String = ValOptions::default().split,
        workers: usize = ValOptions::default().workers,
        verbose: bool = true,
        max_det: usize = ValOptions::default().max_det,
        plots: bool = false,
        save_dir: String = "out/val".into(),
        save_json: bool = ValOptions::default().save_json,
    }
}

pub fn val(m: &mut Yolo, opts: Map) -> RhaiResult<Map> {
    let o = ValOpts::parse("model.val", opts)?;
    let data = o
        .data
        .ok_or_else(|| runtime_error("model.val: `data` (the dataset's data.yaml) is required"))?;
    let vo = ValOptions {
        imgsz: o.imgsz,
        batch: o.batch,
        conf: o.conf,
        iou: o.iou,
        max_det: o.max_det,
        half: o.half,
        rect: o.rect,
        split: o.split,
        workers: o.workers,
        save_json: o.save_json,
    };
    let (verbose, plots, save_dir) = (o.verbose, o.plots, o.save_dir);
    let device = crate::tensor::default_device();
    let model = m.lock();
    let report = guard(|| {
        let config = DataConfig::load(&data)?;
        validate(&model, &config, &vo, device, |_, _| {})
    })?;
    if verbose {
        for w in &report.warnings {
            eprintln!("WARNING {w}");
        }
        println!("{}", report.table);
        println!(
            "{}",
            rusting_brain::vision::report::speed_line(&report.speed)
        );
    }
    let mut out = report_map(&report);
    if plots {
        let written = write_plots(&report, Path::new(&save_dir))?;
        let paths: Array = written.into_iter().map(Dynamic::from).collect();
        out.insert("plots".into(), paths.into());
    }
    if vo.save_json {
        let dir = Path::new(&save_dir);
        let path = dir.join("predictions.json");
        guard(|| {
            std::fs::create_dir_all(dir).map_err(|e| rusting_brain::Error::io(dir, e))?;
            rusting_brain::vision::coco_json::write(&path, &report.predictions)
        })?;
        if verbose {
            println!(
                "Saving {} ({} predictions)",
                path.display(),
                report.predictions.len()
            );
        }
        out.insert("predictions_json".into(), path.display().to_string().into());
    }
    Ok(out)
}

/// ultralytics' `PR_curve.png` and `F1_curve.png` (one line per class and the class mean) and
/// `confusion_matrix_normalized.png` (columns: true class, rows: predicted; the last of each
/// is background; each column divided by its sum). The engine computes every number
/// (`ApPerClass::pr_chart`, `f1_chart`, `ConfusionMatrix::normalized`); this only draws.
fn write_plots(r: &ValReport, dir: &Path) -> RhaiResult<Vec<String>> {
    use crate::plot::{heatmap, line_xy, AxisNames, PlotOptions};
    use rusting_brain::vision::metrics::CurveChart;
    let res = &r.metrics.results;
    let class_name = |c: usize| {
        r.metrics
            .names
            .get(c)
            .cloned()
            .unwrap_or_else(|| c.to_string())
    };
    // One labelled line per class, then the mean under `mean_label`.
    let series = |chart: &CurveChart, label: &dyn Fn(usize) -> String, mean_label: String| {
        let mut lines: Vec<(String, Vec<f64>)> = chart
            .per_class
            .iter()
            .enumerate()
            .map(|(i, line)| (label(i), line.clone()))
            .collect();
        if !chart.mean.is_empty() {
            lines.push((mean_label, chart.mean.clone()));
        }
        lines
    };
    let plot_err = |e: crate::plot::PlotError| runtime_error(format!("model.val plots: {e}"));
    let [_, _, map50, _] = r.metrics.mean_results();
    let pr_chart = res.pr_chart(1000);
    let ap50 = |i: usize| format!("{} {:.3}", class_name(res.classes[i]), res.ap[i][0]);
    let pr = line_xy(
        &pr_chart.x,
        &series(&pr_chart, &ap50, format!("all classes {map50:.3} mAP@0.5")),
        &PlotOptions {
            title: Some("Precision-Recall Curve".into()),
            xlabel: Some("Recall".into()),
            ylabel: Some("Precision".into()),
            path: dir.join("PR_curve.png"),
            ..PlotOptions::default()
        },
    )
    .map_err(plot_err)?;
    let f1_chart = res.f1_chart();
    let (best_conf, best_f1) = f1_chart.peak.unwrap_or((0.0, 0.0));
    let f1 = line_xy(
        &f1_chart.x,
        &series(
            &f1_chart,
            &|i| class_name(res.classes[i]),
            format!("all classes {best_f1:.2} at {best_conf:.3}"),
        ),
        &PlotOptions {
            title: Some("F1-Confidence Curve".into()),
            xlabel: Some("Confidence".into()),
            ylabel: Some("F1".into()),
            path: dir.join("F1_curve.png"),
            ..PlotOptions::default()
        },
    )
    .map_err(plot_err)?;
    let mut classes: Vec<String> = (0..r.confusion.nc).map(class_name).collect();
    classes.push("background".into());
    let cm = heatmap(
        &r.confusion.normalized(),
        &AxisNames {
            rows: classes.clone(),
            columns: classes,
        },
        &PlotOptions {
            title: Some("Confusion Matrix Normalized".into()),
            xlabel: Some("True".into()),
            ylabel: Some("Predicted".into()),
            path: dir.join("confusion_matrix_normalized.png"),
            width: 800,
            height: 800,
            ..PlotOptions::default()
        },
    )
    .map_err(plot_err)?;
    Ok(vec![
        pr.display().to_string(),
        f1.display().to_string(),
        cm.display().to_string(),
    ])
}

fn report_map(r: &ValReport) -> Map {
    let [mp, mr, map50, map] = r.metrics.mean_results();
    let mut out = Map::new();
    out.insert("precision".into(), Dynamic::from_float(mp));
    out.insert("recall".into(), Dynamic::from_float(mr));
    out.insert("map50".into(), Dynamic::from_float(map50));
    out.insert("map".into(), Dynamic::from_float(map));
    out.insert("images".into(), Dynamic::from_int(r.metrics.seen as INT));
    let res = &r.metrics.results;
    let per_class: Array = res
        .classes
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let mut row = Map::new();
            row.insert("class".into(), Dynamic::from_int(c as INT));
            let name = r.metrics.names.get(c).cloned().unwrap_or_default();
            row.insert("name".into(), name.into());
            row.insert(
                "images".into(),
                Dynamic::from_int(r.metrics.nt_per_image.get(c).copied().unwrap_or(0) as INT),
            );
            row.insert(
                "instances".into(),
                Dynamic::from_int(r.metrics.nt_per_class.get(c).copied().unwrap_or(0) as INT),
            );
            // The same per-class figures the printed table shows.
            let [p, recall, map50, map] = r.metrics.class_result(i).unwrap_or([0.0; 4]);
            row.insert("p".into(), Dynamic::from_float(p));
            row.insert("r".into(), Dynamic::from_float(recall));
            row.insert("map50".into(), Dynamic::from_float(map50));
            row.insert("map".into(), Dynamic::from_float(map));
            Dynamic::from_map(row)
        })
        .collect();
    out.insert("per_class".into(), per_class.into());
    let mut speed = Map::new();
    speed.insert("preprocess".into(), Dynamic::from_float(r.speed.preprocess));
    speed.insert("inference".into(), Dynamic::from_float(r.speed.inference));
    speed.insert(
        "postprocess".into(),
        Dynamic::from_float(r.speed.postprocess),
    );
    out.insert("speed".into(), speed.into());
    out.insert(
        "images_per_second".into(),
        Dynamic::from_float(r.images_per_second),
    );
    out.insert(
        "algorithm_search_seconds".into(),
        Dynamic::from_float(r.algorithm_search_seconds),
    );
    out.insert("table".into(), r.table.clone().into());
    let warnings: Array = r
        .warnings
        .iter()
        .map(|w| Dynamic::from(w.clone()))
        .collect();
    out.insert("warnings".into(), warnings.into());
    out
}

/// The image a script passes: a path, or a U8 [H, W, 3] tensor.
fn image_of(v: &Dynamic) -> RhaiResult<RgbImage> {
    if let Some(path) = v.clone().try_cast::<rhai::ImmutableString>() {
        return guard(|| rusting_brain::vision::image::read_rgb(path.as_str()));
    }
    if let Some(t) = v.clone().try_cast::<Tensor>() {
        return guard(|| rusting_brain::vision::image::tensor_to_rgb(&t));
    }
    Err(runtime_error(
        "model.predict: the image must be a path or a U8 [H, W, 3] tensor",
    ))
}

crate::options! {
    struct PredictOpts {
        conf: f64 = PredictOptions::default().conf,
        iou: f64 = PredictOptions::default().iou,
        imgsz: usize = PredictOptions::default().imgsz,
        max_det: usize = PredictOptions::default().max_det,
        half: bool = PredictOptions::default().half,
    }
}

pub fn predict(m: &mut Yolo, image: Dynamic, opts: Map) -> RhaiResult<Array> {
    let o = PredictOpts::parse("model.predict", opts)?;
    let po = PredictOptions {
        conf: o.conf,
        iou: o.iou,
        imgsz: o.imgsz,
        max_det: o.max_det,
        half: o.half,
    };
    let img = image_of(&image)?;
    let device = crate::tensor::default_device();
    let dets = guard(|| m.lock().predict(&img, &po, device))?;
    Ok(dets.iter().map(detection_map).collect())
}

fn detection_map(d: &Detection) -> Dynamic {
    let mut row = Map::new();
    let b: Array = d
        .xyxy
        .iter()
        .map(|v| Dynamic::from_float(*v as FLOAT))
        .collect();
    row.insert("box".into(), b.into());
    row.insert("class".into(), Dynamic::from_int(d.class as INT));
    row.insert("name".into(), d.name.clone().into());
    row.insert(
        "confidence".into(),
        Dynamic::from_float(d.confidence as FLOAT),
    );
    Dynamic::from_map(row)
}
