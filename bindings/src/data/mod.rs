//! The `data::` namespace: datasets (synthetic spirals, CSV, NPY, IDX), splits, scaling and
//! batches. The token-file functions live in `token_files`.

mod captioned;
mod image_folder;
pub mod loader;
mod token_files;
mod yolo;

pub use loader::{Batch, Loader};
pub use yolo::ImageDataset;

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use rhai::{Array, Dynamic, Engine, Map, Module, FLOAT, INT};
use rusting_brain::data::{Dataset, Standardizer};
use rusting_brain::Generator;

crate::options! {
    struct SpiralsOptions {
        noise: f64 = 0.02,
        seed: INT = 0,
    }
}

fn spirals(n: INT, opts: Map) -> RhaiResult<Dataset> {
    let SpiralsOptions { noise, seed } = SpiralsOptions::parse("data::spirals", opts)?;
    let n = crate::convert::usize_of(n, "data::spirals")?;
    guard(|| {
        let (x, y) =
            rusting_brain::data::spirals::two_spirals(n, noise, &mut Generator::new(seed as u64))?;
        Dataset::new(x, y)
    })
}

fn pair(a: Dataset, b: Dataset) -> Array {
    vec![Dynamic::from(a), Dynamic::from(b)]
}

/// `ds.classes`: the class names, or the ids as strings ("0", "1", ...) when unnamed; empty
/// for regression targets.
fn classes(d: &mut Dataset) -> RhaiResult<Array> {
    if let Some(names) = d.class_names() {
        return Ok(names.iter().map(|n| Dynamic::from(n.clone())).collect());
    }
    let n = guard(|| d.num_classes())?.unwrap_or(0);
    Ok((0..n).map(|i| Dynamic::from(i.to_string())).collect())
}

/// Getters that describe a dataset, with their help.
fn register_getters(engine: &mut Engine) {
    engine.register_get("num_features", |d: &mut Dataset| d.num_features() as INT);
    engine.register_get("num_classes", |d: &mut Dataset| -> RhaiResult<Dynamic> {
        Ok(guard(|| d.num_classes())?.map_or(Dynamic::UNIT, |n| Dynamic::from_int(n as INT)))
    });
    engine.register_get("classes", classes);
    engine.register_get("feature_names", |d: &mut Dataset| -> Array {
        d.feature_names()
            .iter()
            .map(|n| Dynamic::from(n.clone()))
            .collect()
    });
    for (name, signature, doc, example) in [
        ("num_features", "ds.num_features -> int", "The number of feature columns.", "let ds = data::spirals(20, #{ seed: 1 }); print(ds.num_features)"),
        ("num_classes", "ds.num_classes -> int or ()", "The number of classes (named, or the largest id plus one); () for regression targets. A detection dataset's class count.", "let ds = data::spirals(20, #{ seed: 1 }); print(ds.num_classes)"),
        ("classes", "ds.classes -> array", "The class names (the ids as strings when unnamed).", "let ds = data::spirals(20, #{ seed: 1 }); print(ds.classes)"),
        ("feature_names", "ds.feature_names -> array", "The feature columns' names (x0, x1, ... unless the file named them).", "let ds = data::spirals(20, #{ seed: 1 }); print(ds.feature_names)"),
    ] {
        crate::help::getter(name, signature, doc, example);
    }
}

pub fn register(engine: &mut Engine) {
    engine.register_type_with_name::<Dataset>("Dataset");
    engine.register_type_with_name::<Standardizer>("Standardizer");
    token_files::register_types(engine);
    loader::register_types(engine);
    yolo::register_types(engine);
    engine.register_type_with_name::<captioned::Captioned>("CaptionedImages");
    engine.register_get("len", |d: &mut captioned::Captioned| d.0.len() as INT);
    engine.register_get("captions", |d: &mut captioned::Captioned| -> Array {
        d.0.samples
            .iter()
            .map(|(_, c)| Dynamic::from(c.clone()))
            .collect()
    });
    register_getters(engine);
    // Datasets stay on the host; what a script reads goes to its device (`--device`).
    engine.register_get("features", |d: &mut Dataset| {
        guard(|| d.features().to_device(crate::tensor::default_device()))
    });
    engine.register_get("targets", |d: &mut Dataset| {
        guard(|| d.targets().to_device(crate::tensor::default_device()))
    });
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("data"));
        api.func(
            "spirals",
            "data::spirals(n_per_class, #{ noise, seed }) -> Dataset",
            "The two-spirals classification set, seeded.",
            "let ds = data::spirals(300, #{ noise: 0.02, seed: 1 });",
            spirals,
        );
        api.func("csv", "data::csv(path, label_column) -> Dataset", "A CSV file with a header; the label column holds class names, the rest numeric features (an empty cell is NaN, with a warning).", "io::write_text(\"iris.csv\", \"sepal,petal,species\\n5.1,1.4,setosa\\n7.0,4.7,versicolor\\n\"); let ds = data::csv(\"iris.csv\", \"species\");", |p: &str, label: &str| guard(|| Dataset::from_csv(p, label)));
        api.func("csv", "data::csv(path, label_column, #{ task, missing, delimiter }) -> Dataset", "data::csv with options: task \"classification\" (the default: labels are class names) or \"regression\" (labels are numbers, f32 targets); missing \"nan\" (the default, as pandas) or \"error\" for empty cells; delimiter a one-character string (default \",\").", "io::write_text(\"house.csv\", \"rooms,area,price\\n3,70,210.5\\n4,95,260\\n\"); let ds = data::csv(\"house.csv\", \"price\", #{ task: \"regression\" });", csv_with_options);
        api.func(
            "image_folder",
            "data::image_folder(dir, #{ imgsz, augment, min_scale, flip, color_jitter, val_split, seed, batch_size, workers, model, mixup, cutmix, mean, std }) -> map",
            "An ImageNet-layout folder (one subfolder a class) as #{ train, val, classes, train_size, val_size }: train and val are loaders of x [B, 3, imgsz, imgsz] and y [B] class ids, decoded on worker threads. val_split (0) of each class is held out by seed; augment (true) gives training a random resized crop and flip; the evaluation transform is model's preprocessor_config.json (a vision::load model) or ImageNet's at imgsz (224), normalised by mean and std (ImageNet's; 0.5 and 0.5 give a diffusion model's [-1, 1]). mixup and cutmix (Beta alphas, 0 = off; torchvision's 0.8 and 1.0 are usual) mix each training batch with itself rolled by one, as torchvision's MixUp/CutMix (one of the two a batch when both are on); the training y are then class probabilities [B, classes], which nn::cross_entropy takes.",
            "try { data::image_folder(\"no_such_folder\", #{ imgsz: 32 }); } catch (e) { print(e); }",
            image_folder::image_folder,
        );
        api.func(
            "captioned_images",
            "data::captioned_images(dir) -> CaptionedImages",
            "Images with captions for text-to-image training: every image under dir (jpg, png) with the caption of the .txt file of its stem beside it (kohya's layout) or of its row in dir/metadata.jsonl ({\"file_name\", \"text\"}, Hugging Face's imagefolder). ds.len and ds.captions; ds.batch(indices, imgsz) gives #{ x: [N, 3, imgsz, imgsz] in [-1, 1] (short side resized to imgsz, centre crop, as diffusers' training scripts), captions }.",
            "try { data::captioned_images(\"no_such_folder\"); } catch (e) { print(e); }",
            captioned::open,
        );
        api.method(
            "batch",
            "ds.batch(indices, imgsz) -> map",
            "Images `indices` of a data::captioned_images folder as #{ x: [N, 3, imgsz, imgsz] in [-1, 1], captions }.",
            "try { data::captioned_images(\"no_such_folder\").batch([0, 1], 64); } catch (e) { print(e); }",
            captioned::batch,
        );
        api.func(
            "npy",
            "data::npy(features_path, targets_path) -> Dataset",
            "Features [N, ...] and targets [N] from two .npy files.",
            "io::save_npy(randn([4, 2]), \"x.npy\"); io::save_npy(tensor([0, 1, 1, 0]), \"y.npy\"); let ds = data::npy(\"x.npy\", \"y.npy\");",
            |f: &str, t: &str| guard(|| Dataset::from_npy(f, t)),
        );
        api.func(
            "idx",
            "data::idx(images_path, labels_path) -> Dataset",
            "MNIST-style IDX files; u8 pixels are scaled to [0, 1].",
            "io::save_idx(zeros([2, 28, 28], #{ dtype: \"u8\" }), \"images.idx\"); io::save_idx(tensor([3, 7], #{ dtype: \"u8\" }), \"labels.idx\"); let ds = data::idx(\"images.idx\", \"labels.idx\");",
            |f: &str, t: &str| guard(|| Dataset::from_idx(f, t)),
        );
        api.method(
            "len",
            "ds.len() -> int",
            "The number of rows.",
            "let ds = data::spirals(20, #{ seed: 1 }); print(ds.len())",
            |d: &mut Dataset| d.len() as INT,
        );
        api.method(
            "split",
            "ds.split(fraction, seed) -> [train, test]",
            "A seeded random split; fraction goes to the first part.",
            "let ds = data::spirals(20, #{ seed: 1 }); let parts = ds.split(0.8, 7); let train = parts[0];",
            |d: &mut Dataset, f: FLOAT, seed: INT| {
                guard(|| d.split(f, &mut Generator::new(seed as u64))).map(|(a, b)| pair(a, b))
            },
        );
        api.method(
            "stratified_split",
            "ds.stratified_split(fraction, seed) -> [train, test]",
            "A split that keeps each class's proportion.",
            "let ds = data::spirals(20, #{ seed: 1 }); let parts = ds.stratified_split(0.8, 7);",
            |d: &mut Dataset, f: FLOAT, seed: INT| {
                guard(|| d.stratified_split(f, &mut Generator::new(seed as u64)))
                    .map(|(a, b)| pair(a, b))
            },
        );
        api.method("batches", "ds.batches(#{ batch_size, shuffle, seed, drop_last }) -> array", "One epoch of [features, targets] batches, built at once (ds.loader makes them as the loop asks).", "let train = data::spirals(20, #{ seed: 1 }); let epoch = 3; for b in train.batches(#{ batch_size: 16, shuffle: true, seed: epoch }) { let x = b[0]; let y = b[1]; }", loader::batches);
        api.method("loader", "ds.loader(#{ batch_size, shuffle, seed, drop_last }) -> Loader", "Lazy batches for a `for` loop: each batch (batch.x features, batch.y targets, on the script's device) is made when the loop asks for it; iterating the loader again is the next epoch (a new order when shuffled). Ctrl-C stops it.", "let train = data::spirals(50, #{ seed: 1 }); let loader = train.loader(#{ batch_size: 16, shuffle: true, seed: 1 }); for epoch in 0..2 { for batch in loader { let n = batch.x.shape[0]; } }", loader::rows);
        api.method(
            "len",
            "loader.len() -> int",
            "Batches per epoch.",
            "let l = data::spirals(50, #{ seed: 1 }).loader(#{ batch_size: 16 }); print(l.len())",
            loader::len,
        );
        api.func(
            "standardizer",
            "data::standardizer(ds) -> Standardizer",
            "Per-feature mean and std fitted on a dataset, reusable on others.",
            "let parts = data::spirals(20, #{ seed: 1 }).split(0.8, 7); let train = parts[0]; let test = parts[1]; let sc = data::standardizer(train); let test2 = sc.transform(test);",
            |d: Dataset| guard(|| Standardizer::fit_dataset(&d)),
        );
        api.method(
            "transform",
            "scaler.transform(ds) -> Dataset",
            "Standardizes a dataset's features with the fitted mean and std.",
            "let train = data::spirals(20, #{ seed: 1 }); let sc = data::standardizer(train); let train2 = sc.transform(train);",
            |s: &mut Standardizer, d: Dataset| guard(|| s.transform_dataset(&d)),
        );
        token_files::register(&mut api);
        yolo::register(&mut api);
    }
    engine.register_static_module("data", module.into());
}

crate::options! {
    struct CsvOpts {
        task: String,
        missing: String,
        delimiter: String,
    }
}

/// `data::csv(path, label, #{ task, missing, delimiter })`.
fn csv_with_options(path: &str, label: &str, opts: Map) -> RhaiResult<Dataset> {
    use rusting_brain::data::csv::{read_csv, CsvOptions};
    const WHAT: &str = "data::csv";
    let o = CsvOpts::parse(WHAT, opts)?;
    let mut options = match o.task.as_deref() {
        None | Some("classification") => CsvOptions::classification(label),
        Some("regression") => CsvOptions::regression(label),
        Some(other) => {
            return Err(runtime_error(format!(
                "{WHAT}: task {other:?} is not one of \"classification\", \"regression\""
            )))
        }
    };
    options.empty_is_nan = match o.missing.as_deref() {
        None | Some("nan") => true,
        Some("error") => false,
        Some(other) => {
            return Err(runtime_error(format!(
                "{WHAT}: missing {other:?} is not one of \"nan\", \"error\""
            )))
        }
    };
    if let Some(d) = o.delimiter {
        options.delimiter = match d.as_bytes() {
            [b] => *b,
            _ => {
                return Err(runtime_error(format!(
                    "{WHAT}: delimiter {d:?} must be one ASCII character"
                )))
            }
        };
    }
    guard(|| read_csv(path, &options))
}
