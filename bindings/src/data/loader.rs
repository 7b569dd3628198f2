//! `ds.loader(#{ batch_size, shuffle, seed, drop_last })`: a lazy, re-iterable loader.
//!
//! ```rhai
//! for batch in train.loader(#{ batch_size: 32, shuffle: true, seed: 1 }) {
//!     let loss = nn::cross_entropy(model.forward(batch.x), batch.y);
//! }
//! ```
//!
//! Each `for` over a loader is one epoch, made batch by batch as the loop asks for it (the
//! engine's `DataLoader` for rows, its threaded image loader for detection datasets), so
//! nothing of an epoch is built up front and `break` stops the work. A loader is a shared
//! handle: iterating the same loader again draws the next epoch's order. Batches go to the
//! script's device. Ctrl-C stops the loop between batches.

use super::yolo::ImageSource;
use crate::error::{guard, RhaiResult};
use crate::options::Options;
use rhai::{Array, Dynamic, EvalAltResult, Map, Position, INT};
use rusting_brain::data::yolo::ValLoader;
use rusting_brain::data::{Batches, DataLoader, Dataset};
use rusting_brain::{Generator, Tensor};
use std::sync::{Arc, Mutex, MutexGuard};

/// The options `loader` and `batches` take for row datasets.
pub const ROW_OPTIONS: &[&str] = &["batch_size", "shuffle", "seed", "drop_last"];

/// One batch: `batch.x` (inputs) and `batch.y` (targets), on the script's device.
#[derive(Clone)]
pub struct Batch {
    pub x: Tensor,
    pub y: Tensor,
    /// The image files of an image batch, in batch order.
    pub paths: Option<Array>,
}

/// What a loader draws its epochs from.
pub(super) enum Source {
    Rows(DataLoader),
    Images(ImageSource),
}

/// The Rhai value of `ds.loader(...)`.
#[derive(Clone)]
pub struct Loader(Arc<Mutex<Source>>);

impl Loader {
    pub(super) fn new(source: Source) -> Loader {
        Loader(Arc::new(Mutex::new(source)))
    }

    fn lock(&self) -> MutexGuard<'_, Source> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Batches per epoch.
    pub fn len(&self) -> usize {
        match &*self.lock() {
            Source::Rows(l) => l.num_batches(),
            Source::Images(s) => s.num_batches(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A row loader over `ds` from the script's options.
pub fn row_loader(ds: Dataset, opts: Map, what: &str) -> RhaiResult<DataLoader> {
    let o = Options::new(what, opts, ROW_OPTIONS)?;
    let (bs, shuffle, seed, drop_last) = (
        o.usize("batch_size", 32)?,
        o.bool("shuffle", false)?,
        o.int("seed", 0)?,
        o.bool("drop_last", false)?,
    );
    let mut loader = guard(|| DataLoader::new(ds, bs))?.drop_last(drop_last);
    if shuffle {
        loader = loader.shuffled(Generator::new(seed as u64));
    }
    Ok(loader)
}

/// `ds.loader(opts)` for a row dataset.
pub fn rows(ds: &mut Dataset, opts: Map) -> RhaiResult<Loader> {
    let loader = row_loader(ds.clone(), opts, "loader")?;
    Ok(Loader::new(Source::Rows(loader)))
}

/// One epoch of a loader, consumed by a `for` loop.
pub enum Pass {
    Rows(Batches),
    Images(Box<ValLoader>),
    /// The epoch could not start; the error is reported once.
    Failed(Option<Box<EvalAltResult>>),
}

impl IntoIterator for Loader {
    type Item = RhaiResult<Dynamic>;
    type IntoIter = Pass;

    fn into_iter(self) -> Pass {
        match &mut *self.lock() {
            Source::Rows(l) => Pass::Rows(l.epoch()),
            Source::Images(s) => match s.epoch() {
                Ok(pass) => Pass::Images(Box::new(pass)),
                Err(e) => Pass::Failed(Some(e)),
            },
        }
    }
}

impl Iterator for Pass {
    type Item = RhaiResult<Dynamic>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Pass::Failed(e) = self {
            return e.take().map(Err);
        }
        if rusting_brain::cancel::is_requested() {
            *self = Pass::Failed(None);
            let stop = EvalAltResult::ErrorTerminated("cancelled".into(), Position::NONE);
            return Some(Err(stop.into()));
        }
        let device = crate::tensor::default_device();
        let batch = match self {
            Pass::Rows(b) => b.next().map(|r| {
                guard(|| {
                    let (x, y) = r?;
                    Ok(Batch {
                        x: x.to_device(device)?,
                        y: y.to_device(device)?,
                        paths: None,
                    })
                })
            }),
            Pass::Images(l) => l.next().map(|r| super::yolo::image_batch(r, device)),
            Pass::Failed(_) => None,
        };
        batch.map(|b| b.map(Dynamic::from))
    }
}

/// `ds.batches(opts)`: one epoch as an array of `[x, y]`, through the same loader.
pub fn batches(ds: Dataset, opts: Map) -> RhaiResult<Array> {
    let loader = Loader::new(Source::Rows(row_loader(ds, opts, "batches")?));
    loader
        .into_iter()
        .map(|b| {
            let b = b?.cast::<Batch>();
            Ok(Dynamic::from_array(vec![
                Dynamic::from(b.x),
                Dynamic::from(b.y),
            ]))
        })
        .collect()
}

/// Registers the `Loader` and `Batch` types: iteration, `loader.len()`, `batch.x`, `batch.y`,
/// `batch.paths`.
pub fn register_types(engine: &mut rhai::Engine) {
    engine.register_type_with_name::<Loader>("Loader");
    engine.register_type_with_name::<Batch>("Batch");
    engine.register_iterator_result::<Loader, Dynamic>();
    engine.register_get("x", |b: &mut Batch| b.x.clone());
    engine.register_get("y", |b: &mut Batch| b.y.clone());
    engine.register_get("paths", |b: &mut Batch| -> Dynamic {
        b.paths.clone().map_or(Dynamic::UNIT, Dynamic::from_array)
    });
    for (name, signature, doc, example) in [
        ("x", "batch.x -> Tensor", "A batch's inputs on the script's device: features [B, F], or images [B, 3, H, W] in [0, 1].", "let ds = data::spirals(20, #{ seed: 1 }); for b in ds.loader(#{ batch_size: 8 }) { print(b.x.shape); }"),
        ("y", "batch.y -> Tensor", "A batch's targets: [B] class ids or values, or for images the boxes [n, 6] (image in batch, class, cx, cy, w, h; normalised to the letterboxed image).", "let ds = data::spirals(20, #{ seed: 1 }); for b in ds.loader(#{ batch_size: 8 }) { print(b.y.shape); }"),
        ("paths", "batch.paths -> array or ()", "An image batch's files in batch order; () for row batches.", "let ds = data::spirals(20, #{ seed: 1 }); for b in ds.loader(#{ batch_size: 8 }) { print(b.paths); }"),
    ] {
        crate::help::getter(name, signature, doc, example);
    }
}

pub fn len(l: &mut Loader) -> INT {
    l.len() as INT
}
