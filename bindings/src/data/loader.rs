//! `ds.loader(#{ batch_size, shuffle, seed, drop_last })`: a lazy, re-iterable loader.
//!
//! ```rhai
//! for batch in train.loader(#{ batch_size: 32, shuffle: true, seed: 1 }) {
//!     let loss = nn::cross_entropy(model.forward(batch.x), batch.y);
//! }
//! ```
//!
//! Each `for` over a loader is one epoch of the engine's `BatchSource` (rows of a dataset, or
//! a detection split's images decoded on worker threads), made batch by batch as the loop asks
//! for it, so nothing of an epoch is built up front and `break` stops the work. A loader is a
//! shared handle: iterating the same loader again draws the next epoch's order. Batches go to
//! the script's device. Ctrl-C stops the loop between batches.

use crate::error::{guard, RhaiResult};
use rhai::{Array, Dynamic, EvalAltResult, Map, Position, INT};
use rusting_brain::data::{BatchSource, DataLoader, Dataset, Epoch};
use rusting_brain::{Generator, Tensor};
use std::sync::{Arc, Mutex, MutexGuard};

crate::options! {
    /// The options `loader` and `batches` take for row datasets.
    struct RowOptions {
        batch_size: usize = 32,
        shuffle: bool = false,
        seed: INT = 0,
        drop_last: bool = false,
    }
}

/// One batch: `batch.x` (inputs) and `batch.y` (targets), on the script's device.
#[derive(Clone)]
pub struct Batch {
    pub x: Tensor,
    pub y: Tensor,
    /// The image files of an image batch, in batch order.
    pub paths: Option<Array>,
}

impl From<rusting_brain::data::Batch> for Batch {
    fn from(b: rusting_brain::data::Batch) -> Self {
        let paths = (!b.paths.is_empty()).then(|| {
            b.paths
                .iter()
                .map(|p| Dynamic::from(p.display().to_string()))
                .collect()
        });
        Batch {
            x: b.x,
            y: b.y,
            paths,
        }
    }
}

/// The Rhai value of `ds.loader(...)`.
#[derive(Clone)]
pub struct Loader(Arc<Mutex<Box<dyn BatchSource>>>);

impl Loader {
    pub(super) fn new(source: impl BatchSource + 'static) -> Loader {
        Loader(Arc::new(Mutex::new(Box::new(source))))
    }

    fn lock(&self) -> MutexGuard<'_, Box<dyn BatchSource>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Batches per epoch.
    pub fn len(&self) -> usize {
        self.lock().num_batches()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A row loader over `ds` from the script's options.
pub fn row_loader(ds: Dataset, opts: Map, what: &str) -> RhaiResult<DataLoader> {
    let RowOptions {
        batch_size: bs,
        shuffle,
        seed,
        drop_last,
    } = RowOptions::parse(what, opts)?;
    let mut loader = guard(|| DataLoader::new(ds, bs))?.drop_last(drop_last);
    if shuffle {
        loader = loader.shuffled(Generator::new(seed as u64));
    }
    Ok(loader)
}

/// `ds.loader(opts)` for a row dataset.
pub fn rows(ds: &mut Dataset, opts: Map) -> RhaiResult<Loader> {
    let loader = row_loader(ds.clone(), opts, "loader")?;
    Ok(Loader::new(loader))
}

/// One epoch of a loader, consumed by a `for` loop.
pub enum Pass {
    Running(Epoch),
    /// The epoch could not start, or ended; an error is reported once.
    Failed(Option<Box<EvalAltResult>>),
}

impl IntoIterator for Loader {
    type Item = RhaiResult<Dynamic>;
    type IntoIter = Pass;

    fn into_iter(self) -> Pass {
        let device = crate::tensor::default_device();
        match guard(|| self.lock().epoch(device)) {
            Ok(epoch) => Pass::Running(epoch),
            Err(e) => Pass::Failed(Some(e)),
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
        let Pass::Running(epoch) = self else {
            return None;
        };
        let batch = epoch.next()?;
        Some(guard(|| batch).map(|b| Dynamic::from(Batch::from(b))))
    }
}

/// `ds.batches(opts)`: one epoch as an array of `[x, y]`, through the same loader.
pub fn batches(ds: Dataset, opts: Map) -> RhaiResult<Array> {
    let loader = Loader::new(row_loader(ds, opts, "batches")?);
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
