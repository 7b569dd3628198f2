//! Batch sources: what a training loop iterates, one epoch at a time, whatever the data is.
//! Rows of a `Dataset` (`DataLoader`) and images of a detection split (`yolo::ImageBatches`)
//! are both a `BatchSource`, so a script's `loader` and any other consumer hold one type and
//! know nothing of where batches come from.

use super::batches::DataLoader;
use crate::{Device, Result, Tensor};
use std::path::PathBuf;

/// One batch on the consumer's device: inputs, targets, and the files it was read from (for
/// file-backed sources; empty otherwise).
#[derive(Clone, Debug)]
pub struct Batch {
    pub x: Tensor,
    pub y: Tensor,
    pub paths: Vec<PathBuf>,
}

/// One epoch: batches made as they are asked for.
pub type Epoch = Box<dyn Iterator<Item = Result<Batch>> + Send>;

/// A re-iterable source of batches. Each `epoch` is a new pass (a shuffling source draws a
/// new order), with its batches placed on `device`.
pub trait BatchSource: Send {
    /// Batches in each epoch.
    fn num_batches(&self) -> usize;
    fn epoch(&mut self, device: Device) -> Result<Epoch>;
}

impl BatchSource for DataLoader {
    fn num_batches(&self) -> usize {
        DataLoader::num_batches(self)
    }

    fn epoch(&mut self, device: Device) -> Result<Epoch> {
        Ok(Box::new(DataLoader::epoch(self).map(move |r| {
            let (x, y) = r?;
            Ok(Batch {
                x: x.to_device(device)?,
                y: y.to_device(device)?,
                paths: Vec::new(),
            })
        })))
    }
}
