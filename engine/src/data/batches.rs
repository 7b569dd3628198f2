//! Mini-batches over a dataset. A loader owns its generator, so each epoch draws a fresh order
//! while the whole run still repeats exactly from the same seed, and saving the generator's
//! state is enough to resume mid-run.

use super::Dataset;
use crate::{Error, Generator, Result, Tensor};

/// Iterates a dataset in batches of `batch_size` rows, in order or shuffled each epoch.
#[derive(Clone, Debug)]
pub struct DataLoader {
    dataset: Dataset,
    batch_size: usize,
    drop_last: bool,
    shuffle: Option<Generator>,
}

impl DataLoader {
    /// Batches in row order, keeping a final short batch.
    pub fn new(dataset: Dataset, batch_size: usize) -> Result<DataLoader> {
        if batch_size == 0 {
            return Err(Error::invalid(
                "data_loader",
                "batch_size must be at least 1",
            ));
        }
        Ok(DataLoader {
            dataset,
            batch_size,
            drop_last: false,
            shuffle: None,
        })
    }

    /// Reshuffles the rows at the start of every epoch with draws from `gen`.
    pub fn shuffled(mut self, gen: Generator) -> DataLoader {
        self.shuffle = Some(gen);
        self
    }

    /// Skips a final batch smaller than `batch_size`, for models that need full batches.
    pub fn drop_last(mut self, on: bool) -> DataLoader {
        self.drop_last = on;
        self
    }

    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The shuffle generator's current state, for checkpoints.
    pub fn generator(&self) -> Option<&Generator> {
        self.shuffle.as_ref()
    }

    /// Batches per epoch.
    pub fn num_batches(&self) -> usize {
        let n = self.dataset.len();
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }

    /// One pass over the data, made batch by batch as it is consumed (nothing of the epoch is
    /// built up front but the row order). The order is drawn now, so the generator advances once
    /// per epoch whether or not the caller consumes every batch. The pass holds its own handle
    /// on the dataset, so it may outlive the loader.
    pub fn epoch(&mut self) -> Batches {
        let n = self.dataset.len();
        let order = match &mut self.shuffle {
            Some(g) => g.permutation(n),
            None => (0..n).collect(),
        };
        let end = self.num_batches() * self.batch_size;
        Batches {
            dataset: self.dataset.clone(),
            order,
            next: 0,
            end: end.min(n),
            batch_size: self.batch_size,
        }
    }
}

/// The batches of one epoch: `(features [B, F], targets [B])` per step.
pub struct Batches {
    dataset: Dataset,
    order: Vec<usize>,
    next: usize,
    /// One past the last row served (shorter than `order` under drop_last).
    end: usize,
    batch_size: usize,
}

impl Iterator for Batches {
    type Item = Result<(Tensor, Tensor)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.end {
            return None;
        }
        // Ctrl-C stops a pass over the data between batches.
        if let Err(e) = crate::cancel::check() {
            self.next = self.end;
            return Some(Err(e));
        }
        let stop = (self.next + self.batch_size).min(self.end);
        let rows: Vec<i64> = self.order[self.next..stop]
            .iter()
            .map(|&i| i as i64)
            .collect();
        self.next = stop;
        let select = || {
            let len = rows.len();
            let idx = Tensor::from_vec(rows, &[len])?;
            Ok((
                self.dataset.features().index_select(0, &idx)?,
                self.dataset.targets().index_select(0, &idx)?,
            ))
        };
        Some(select())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.end - self.next).div_ceil(self.batch_size);
        (left, Some(left))
    }
}

impl ExactSizeIterator for Batches {}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy(n: usize) -> Dataset {
        let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let y: Vec<i64> = (0..n as i64).collect();
        Dataset::new(
            Tensor::from_vec(x, &[n, 1]).unwrap(),
            Tensor::from_vec(y, &[n]).unwrap(),
        )
        .unwrap()
    }

    fn epoch_rows(loader: &mut DataLoader) -> Vec<Vec<i64>> {
        loader
            .epoch()
            .map(|b| {
                let (x, y) = b.unwrap();
                let xs: Vec<i64> = x
                    .to_vec::<f32>()
                    .unwrap()
                    .iter()
                    .map(|&v| v as i64)
                    .collect();
                assert_eq!(
                    xs,
                    y.to_vec::<i64>().unwrap(),
                    "features and targets stay paired"
                );
                xs
            })
            .collect()
    }

    #[test]
    fn batches_cover_the_rows_in_order_with_a_short_last_batch() {
        let mut l = DataLoader::new(toy(7), 3).unwrap();
        assert_eq!(l.num_batches(), 3);
        assert_eq!(l.epoch().len(), 3);
        assert_eq!(
            epoch_rows(&mut l),
            vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]
        );
    }

    #[test]
    fn drop_last_skips_the_short_batch() {
        let mut l = DataLoader::new(toy(7), 3).unwrap().drop_last(true);
        assert_eq!(l.num_batches(), 2);
        assert_eq!(epoch_rows(&mut l), vec![vec![0, 1, 2], vec![3, 4, 5]]);
        let mut tiny = DataLoader::new(toy(2), 3).unwrap().drop_last(true);
        assert!(epoch_rows(&mut tiny).is_empty());
    }

    #[test]
    fn shuffled_epochs_differ_but_repeat_from_the_same_seed() {
        let mut a = DataLoader::new(toy(10), 4)
            .unwrap()
            .shuffled(Generator::new(9));
        let mut b = DataLoader::new(toy(10), 4)
            .unwrap()
            .shuffled(Generator::new(9));
        let (a1, a2) = (epoch_rows(&mut a), epoch_rows(&mut a));
        assert_eq!(a1, epoch_rows(&mut b));
        assert_eq!(a2, epoch_rows(&mut b));
        assert_ne!(a1, a2);
        let mut all: Vec<i64> = a1.into_iter().flatten().collect();
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn a_zero_batch_size_is_an_error() {
        assert!(DataLoader::new(toy(3), 0).is_err());
    }
}
