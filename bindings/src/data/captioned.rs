//! `data::captioned_images(dir)`: a folder of images with captions for text-to-image training
//! (`rusting_brain::data::captioned_images`), and its batches.

use crate::error::{guard, runtime_error, RhaiResult};
use rhai::{Array, Dynamic, Map, INT};
use rusting_brain::data::captioned_images::CaptionedImages;
use std::sync::Arc;

/// A shared handle: the sample list is read once, batches decode on demand.
#[derive(Clone)]
pub struct Captioned(pub Arc<CaptionedImages>);

pub fn open(dir: &str) -> RhaiResult<Captioned> {
    guard(|| CaptionedImages::open(dir)).map(|c| Captioned(Arc::new(c)))
}

/// `ds.batch(indices, imgsz)`: #{ x: [N, 3, imgsz, imgsz] in [-1, 1], captions }.
pub fn batch(ds: &mut Captioned, indices: Array, imgsz: INT) -> RhaiResult<Map> {
    let indices = indices
        .iter()
        .map(|d| {
            d.as_int()
                .ok()
                .and_then(|i| usize::try_from(i).ok())
                .ok_or_else(|| {
                    runtime_error(format!(
                        "ds.batch: indices are non-negative integers, got {}",
                        d.type_name()
                    ))
                })
        })
        .collect::<RhaiResult<Vec<_>>>()?;
    let side = usize::try_from(imgsz)
        .map_err(|_| runtime_error(format!("ds.batch: imgsz {imgsz} is negative")))?;
    let (x, captions) = guard(|| ds.0.batch(&indices, side))?;
    let mut out = Map::new();
    out.insert("x".into(), Dynamic::from(x));
    out.insert(
        "captions".into(),
        Dynamic::from_array(captions.into_iter().map(Dynamic::from).collect()),
    );
    Ok(out)
}
