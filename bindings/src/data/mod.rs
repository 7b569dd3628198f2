//! The `data::` namespace: datasets (synthetic spirals, CSV, NPY, IDX), splits, scaling and
//! batches. The token-file functions live in `token_files`.

mod token_files;
mod yolo;

use crate::error::{guard, RhaiResult};
use crate::help::Api;
use crate::options::Options;
use rhai::{Array, Dynamic, Engine, Map, Module, FLOAT, INT};
use rusting_brain::data::{DataLoader, Dataset, Standardizer};
use rusting_brain::Generator;

fn spirals(n: INT, opts: Map) -> RhaiResult<Dataset> {
    let o = Options::new("data::spirals", opts, &["noise", "seed"])?;
    let n = crate::convert::usize_of(n, "data::spirals")?;
    let (noise, seed) = (o.float("noise", 0.02)?, o.int("seed", 0)?);
    guard(|| {
        let (x, y) =
            rusting_brain::data::spirals::two_spirals(n, noise, &mut Generator::new(seed as u64))?;
        Dataset::new(x, y)
    })
}

fn pair(a: Dataset, b: Dataset) -> Array {
    vec![Dynamic::from(a), Dynamic::from(b)]
}

fn batches(ds: Dataset, opts: Map) -> RhaiResult<Array> {
    let o = Options::new(
        "batches",
        opts,
        &["batch_size", "shuffle", "seed", "drop_last"],
    )?;
    let (bs, shuffle, seed, drop_last) = (
        o.usize("batch_size", 32)?,
        o.bool("shuffle", false)?,
        o.int("seed", 0)?,
        o.bool("drop_last", false)?,
    );
    guard(|| {
        let mut loader = DataLoader::new(ds, bs)?.drop_last(drop_last);
        if shuffle {
            loader = loader.shuffled(Generator::new(seed as u64));
        }
        loader
            .epoch()
            .map(|b| {
                // Datasets stay on the host; batches go to the script's device.
                b.and_then(|(x, y)| {
                    let d = crate::tensor::default_device();
                    Ok(Dynamic::from_array(vec![
                        Dynamic::from(x.to_device(d)?),
                        Dynamic::from(y.to_device(d)?),
                    ]))
                })
            })
            .collect()
    })
}

pub fn register(engine: &mut Engine) {
    engine.register_type_with_name::<Dataset>("Dataset");
    engine.register_type_with_name::<Standardizer>("Standardizer");
    token_files::register_types(engine);
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
        api.func("csv", "data::csv(path, label_column) -> Dataset", "A CSV file with a header; the label column holds class names, the rest numeric features.", "io::write_text(\"iris.csv\", \"sepal,petal,species\\n5.1,1.4,setosa\\n7.0,4.7,versicolor\\n\"); let ds = data::csv(\"iris.csv\", \"species\");", |p: &str, label: &str| guard(|| Dataset::from_csv(p, label)));
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
        api.method("batches", "ds.batches(#{ batch_size, shuffle, seed, drop_last }) -> array", "One epoch of [features, targets] batches.", "let train = data::spirals(20, #{ seed: 1 }); let epoch = 3; for b in train.batches(#{ batch_size: 16, shuffle: true, seed: epoch }) { let x = b[0]; let y = b[1]; }", batches);
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
