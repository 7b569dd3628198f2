//! The `yolo::` namespace: YOLOv8/YOLO11 detectors loaded from ultralytics weights or built
//! from a model YAML, validated on an ultralytics dataset, run on images, and trained.

mod model;
mod train;

pub use model::Yolo;
pub use train::YoloTrain;

use crate::error::{guard, RhaiResult};
use crate::help::Api;
use rhai::{Array, Dynamic, Engine, Map, Module, INT};
use rusting_brain::io::onnx::export::ExportOptions;
use rusting_brain::nn::Module as _;
use std::path::Path;

/// A tiny dataset `data` (data.yaml path) and a 1/16-width YOLO11 `model` with its 6 classes.
macro_rules! with_yolo {
    ($example:expr) => {
        concat!(
            "let data = data::yolo_shapes(\"shapes\", #{ train: 2, val: 2, imgsz: 64 }); ",
            "let model = yolo::model(\"yolo11n.yaml\", #{ classes: 6 }); ",
            $example
        )
    };
}

/// `with_yolo!` and a one-epoch run `t` of it (batch 2, imgsz 64, saving under `run`).
macro_rules! with_trainer {
    ($example:expr) => {
        with_yolo!(concat!(
            "let t = yolo::trainer(model, #{ data: data, epochs: 1, batch: 2, imgsz: 64, save_dir: \"run\" }); ",
            $example
        ))
    };
}

crate::options! {
    struct ExportOnnxOptions {
        opset: INT = ExportOptions::default().opset,
        dynamic_batch: bool = ExportOptions::default().dynamic_batch,
        /// A number or [h, w].
        imgsz: (usize, usize) = (640, 640),
    }
}

pub fn register(engine: &mut Engine) {
    engine.register_type_with_name::<Yolo>("Yolo");
    engine.register_type_with_name::<YoloTrain>("YoloTrainer");
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("yolo"));
        api.func(
            "load",
            "yolo::load(path) -> Yolo",
            "Opens YOLO weights: an ultralytics .pt checkpoint (read without Python), our .safetensors, an ultralytics ONNX export, or a model YAML (yolo11n.yaml, yolov8s.yaml, ... are built in) for a fresh network.",
            "let model = yolo::load(\"yolov8n.yaml\");",
            model::load,
        );
        api.func(
            "model",
            "yolo::model(yaml, #{ classes, seed }) -> Yolo",
            "A freshly initialised detector from a model YAML and scale (yolo11n.yaml); classes is a count or an array of names.",
            "let model = yolo::model(\"yolo11n.yaml\", #{ classes: [\"cat\", \"dog\"] });",
            model::fresh,
        );
        api.method(
            "val",
            "model.val(#{ data, imgsz, batch, conf, iou, half, rect, split, workers, verbose, plots, save_dir }) -> map",
            "Validates on an ultralytics dataset as `yolo val` does; prints the per-class table and speed, returns #{ map50, map, precision, recall, per_class, speed, images_per_second, algorithm_search_seconds, table, warnings } (the speed figures leave out the warm-up batch and cuDNN's algorithm search for shapes first seen later); with plots: true it also writes PR_curve.png, F1_curve.png and confusion_matrix_normalized.png under save_dir (default out/val) and lists them in r.plots; with save_json: true it writes COCO-style predictions.json there (ultralytics' records: image_id, file_name, category_id, bbox [x, y, w, h] in original pixels, score) and returns its path as r.predictions_json.",
            with_yolo!("let r = model.val(#{ data: data, imgsz: 64, batch: 2, verbose: false, plots: true, save_dir: \"val_plots\" }); print(r.map50);"),
            model::val,
        );
        api.method(
            "predict",
            "model.predict(image, #{ conf, iou, imgsz, half }) -> array",
            "Detects objects in an image (a path or a U8 [H, W, 3] tensor): an array of #{ box: [x1, y1, x2, y2], class, name, confidence } in the image's pixels.",
            with_yolo!("let dets = model.predict(\"shapes/images/val/val_00000.jpg\", #{ imgsz: 64, conf: 0.0 });"),
            model::predict,
        );
        api.method(
            "fuse",
            "model.fuse() -> Yolo",
            "The inference form: batch norms folded into the convolutions; same predictions, fewer operations.",
            with_yolo!("let fast = model.fuse();"),
            |m: &mut Yolo| guard(|| m.lock().fuse()).and_then(Yolo::new),
        );
        api.method(
            "save",
            "model.save(path)",
            "Writes the weights to safetensors, with the model YAML and class names in its metadata (yolo::load reads it back).",
            with_yolo!("model.save(\"shapes.safetensors\"); let again = yolo::load(\"shapes.safetensors\");"),
            |m: &mut Yolo, path: &str| guard(|| m.lock().save_safetensors(Path::new(path))),
        );
        let (sig, doc, example) = (
            "model.save_pt(path[, #{ epoch, best_fitness, imgsz, data }]) -> path",
            "Writes an ultralytics checkpoint (FP16 weights, the model YAML and class names, as ultralytics' final best.pt) that ultralytics.YOLO(path) loads, predicts and validates with, and yolo::load reads back. imgsz and data are recorded as its training arguments; epoch defaults to -1 (final weights). The network must be unfused.",
            with_yolo!("model.save_pt(\"out/shapes.pt\", #{ imgsz: 64 }); let again = yolo::load(\"out/shapes.pt\");"),
        );
        api.method("save_pt", sig, doc, example, |m: &mut Yolo, path: &str| {
            model::save_pt(m, path, Map::new())
        });
        api.method("save_pt", sig, doc, example, model::save_pt);
        api.method(
            "export_onnx",
            "model.export_onnx(path, #{ imgsz, opset, dynamic_batch }) -> path",
            "Writes the detector as ONNX in ultralytics' export layout: images [batch, 3, imgsz, imgsz] (float, 0-1) in, output0 [batch, 4 + classes, anchors] out (boxes cx, cy, w, h in input pixels, then class probabilities). imgsz (default 640; a number or [h, w]) is fixed at export and must be a multiple of the largest stride; opset 17 by default.",
            with_yolo!("model.export_onnx(\"out/shapes.onnx\", #{ imgsz: 64 });"),
            |m: &mut Yolo, path: &str, opts: Map| -> RhaiResult<String> {
                let o = ExportOnnxOptions::parse("export_onnx", opts)?;
                let export = ExportOptions {
                    opset: o.opset,
                    dynamic_batch: o.dynamic_batch,
                };
                let size = o.imgsz;
                crate::onnx::prepare(path)?;
                guard(|| m.lock().export_onnx(size, path, &export))?;
                Ok(path.to_string())
            },
        );
        api.method(
            "names",
            "model.names() -> array",
            "The class names, by class id.",
            with_yolo!("print(model.names());"),
            |m: &mut Yolo| -> Array {
                m.lock()
                    .names
                    .iter()
                    .map(|n| Dynamic::from(n.clone()))
                    .collect()
            },
        );
        api.method(
            "summary",
            "model.summary() -> string",
            "One line per layer (from, module, parameters) and the totals.",
            with_yolo!("print(model.summary());"),
            |m: &mut Yolo| m.lock().summary(),
        );
        api.method(
            "num_parameters",
            "model.num_parameters() -> int",
            "The number of trainable parameters.",
            with_yolo!("print(model.num_parameters());"),
            |m: &mut Yolo| m.lock().num_parameters() as INT,
        );
        register_training(&mut api);
    }
    engine.register_static_module("yolo", module.into());
}

/// `yolo::trainer`, `yolo::resume` and the trainer's methods.
fn register_training(api: &mut Api) {
    let (sig, doc) = (
        "yolo::trainer(model | \"yolo11n.yaml\" | \"best.pt\", #{ data, epochs, batch, imgsz, optimizer, lr0, lrf, momentum, weight_decay, warmup_epochs, warmup_momentum, warmup_bias_lr, close_mosaic, nbs, seed, workers, amp, mosaic, save_dir }) -> YoloTrainer",
        "A training run as ultralytics 8.4.190 trains (optimizer auto|SGD|AdamW, warmup, linear decay, nominal batch 64, clipping at 10, EMA, mosaic closed for the last close_mosaic epochs, BF16 autocast on CUDA when amp); a model (trained in place), a model YAML (built with the dataset's classes) or weights to fine-tune. Writes results.csv, last/best .safetensors (resumable) and .pt (ultralytics) under save_dir (default runs/train).",
    );
    api.func(
        "trainer",
        sig,
        doc,
        with_trainer!("print(t.epochs());"),
        train::with_model,
    );
    api.func(
        "trainer",
        sig,
        doc,
        "let data = data::yolo_shapes(\"shapes\", #{ train: 2, val: 2, imgsz: 64 }); let t = yolo::trainer(\"yolo11n.yaml\", #{ data: data, epochs: 1, batch: 2, imgsz: 64, save_dir: \"run\" });",
        train::with_path,
    );
    api.func(
        "resume",
        "yolo::resume(path) -> YoloTrainer",
        "Continues a run from its last.safetensors at the next epoch, with the optimizer, EMA, schedule and data order it had.",
        with_trainer!("t.epoch(); let again = yolo::resume(\"run/last.safetensors\"); print(again.is_finished());"),
        train::resume,
    );
    api.method(
        "resume",
        "t.resume(path)",
        "Loads a checkpoint of this same run (model and settings) into the trainer; the next epoch continues from it.",
        with_trainer!("t.epoch(); t.resume(\"run/last.safetensors\");"),
        train::load_checkpoint,
    );
    api.method(
        "epoch",
        "t.epoch() -> map",
        "Trains one epoch with a progress bar (box, cls, dfl losses, instances, size), validates the EMA, appends results.csv and saves last (and best); returns #{ epoch, epochs, box, cls, dfl, instances, images, lr, steps, skipped, precision, recall, map50, map, fitness, val_box, val_cls, val_dfl, is_best, time, train_seconds, images_per_second, table }. Ctrl-C stops it, saves last and leaves the session usable.",
        with_trainer!("let r = t.epoch(); print(`mAP50-95 ${r.map}`);"),
        train::epoch,
    );
    api.method(
        "history",
        "t.history() -> map",
        "The finished epochs' results by column (epoch, box, cls, dfl, precision, recall, map50, map, val_box, val_cls, val_dfl), for plots.",
        with_trainer!("t.epoch(); print(t.history().box);"),
        train::history,
    );
    api.func(
        "results",
        "yolo::results(path) -> map",
        "A results.csv (ours or ultralytics') read back: each column by its name in the header (epoch, time, train/box_loss, ..., metrics/mAP50-95(B), ..., lr/pg2) to an array of numbers, to compare or plot runs.",
        with_trainer!("t.epoch(); let r = yolo::results(\"run/results.csv\"); print(r[\"metrics/mAP50-95(B)\"]);"),
        train::results,
    );
    api.method(
        "is_finished",
        "t.is_finished() -> bool",
        "Whether every epoch of the run is done.",
        with_trainer!("while !t.is_finished() { t.epoch(); }"),
        train::is_finished,
    );
    api.method(
        "next_epoch",
        "t.next_epoch() -> int",
        "The epoch the next t.epoch() trains, from 1.",
        with_trainer!("print(t.next_epoch());"),
        train::next_epoch,
    );
    api.method(
        "epochs",
        "t.epochs() -> int",
        "The run's length in epochs.",
        with_trainer!("print(t.epochs());"),
        train::epochs,
    );
    api.method(
        "save_dir",
        "t.save_dir() -> string",
        "Where results.csv and the last/best checkpoints go.",
        with_trainer!("print(t.save_dir());"),
        train::save_dir,
    );
    api.method(
        "settings",
        "t.settings() -> map",
        "The run's settings (data, epochs, batch, imgsz, optimizer, lr0, close_mosaic, workers, seed, amp, save_dir); a resumed run's come from its checkpoint.",
        with_trainer!("print(t.settings().data);"),
        train::settings_map,
    );
    api.method(
        "model",
        "t.model() -> Yolo",
        "The detector being trained (shared with the trainer: it changes as training goes on).",
        with_trainer!("print(t.model().num_parameters());"),
        train::model,
    );
    api.method(
        "ema_model",
        "t.ema_model() -> Yolo",
        "A copy of the EMA weights as a detector: what each epoch validates and saves.",
        with_trainer!("let ema = t.ema_model();"),
        train::ema_model,
    );
}
