//! Jobs `0..len` run on worker threads ahead of the consumer, whose results come back in job
//! order: the machinery under the YOLO loaders.
//!
//! Workers take positions from a shared counter and send each result through a bounded channel,
//! so at most `ahead` finished results wait unclaimed in it; the consumer asks for positions in
//! order and parks results that arrive early. Each job's result depends only on its position,
//! so what the consumer sees does not depend on the number of threads or their timing.
//! Dropping the pool stops the workers and joins them.

use crate::{Error, Result};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The worker count a `0` setting means: one per core, at most 8.
pub fn default_workers(requested: usize) -> usize {
    match requested {
        0 => std::thread::available_parallelism()
            .map_or(4, |n| n.get())
            .min(8),
        n => n,
    }
}

/// Results of `job(0)`, `job(1)`, ... computed by worker threads, taken in order.
pub struct OrderedPool<T: Send + 'static> {
    len: usize,
    name: &'static str,
    pending: BTreeMap<usize, T>,
    receiver: Option<Receiver<(usize, T)>>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
}

impl<T: Send + 'static> OrderedPool<T> {
    /// Starts `workers` threads (0: [`default_workers`]) on jobs `0..len`; `name` labels errors.
    pub fn new<F>(name: &'static str, len: usize, workers: usize, ahead: usize, job: F) -> Self
    where
        F: Fn(usize) -> T + Send + Sync + 'static,
    {
        let (sender, receiver) = sync_channel::<(usize, T)>(ahead.max(1));
        let next = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let job = Arc::new(job);
        let threads = default_workers(workers).min(len).max(1);
        let workers = (0..threads)
            .map(|_| {
                let (next, stop, sender, job) =
                    (next.clone(), stop.clone(), sender.clone(), job.clone());
                std::thread::spawn(move || loop {
                    let position = next.fetch_add(1, Ordering::Relaxed);
                    if position >= len || stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if sender.send((position, job(position))).is_err() {
                        return;
                    }
                })
            })
            .collect();
        OrderedPool {
            len,
            name,
            pending: BTreeMap::new(),
            receiver: Some(receiver),
            stop,
            workers,
        }
    }

    /// The number of jobs.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The result of job `position`, waiting for the workers as needed. Each position can be
    /// taken once.
    pub fn take(&mut self, position: usize) -> Result<T> {
        if position >= self.len {
            return Err(Error::invalid(
                self.name,
                format!("job {position} is past the {} jobs", self.len),
            ));
        }
        loop {
            if let Some(done) = self.pending.remove(&position) {
                return Ok(done);
            }
            let receiver = self
                .receiver
                .as_ref()
                .ok_or_else(|| Error::invalid(self.name, "stopped"))?;
            match receiver.recv() {
                Ok((p, result)) => {
                    self.pending.insert(p, result);
                }
                Err(_) => {
                    return Err(Error::invalid(
                        self.name,
                        format!("job {position} was never finished (taken twice, or a worker thread ended early)"),
                    ))
                }
            }
        }
    }
}

impl<T: Send + 'static> Drop for OrderedPool<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Dropping the receiver fails the workers' pending sends, so none blocks forever.
        self.receiver = None;
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_job_order_whatever_the_timing() {
        for workers in [1, 3, 8] {
            let mut pool = OrderedPool::new("test pool", 40, workers, 2, |i| {
                // Later jobs finish first.
                std::thread::sleep(std::time::Duration::from_micros(((40 - i) * 50) as u64));
                i * i
            });
            let got: Vec<usize> = (0..40).map(|i| pool.take(i).unwrap()).collect();
            assert_eq!(got, (0..40).map(|i| i * i).collect::<Vec<_>>());
        }
    }

    #[test]
    fn taking_past_the_end_or_twice_is_an_error() {
        let mut pool = OrderedPool::new("test pool", 2, 2, 1, |i| i);
        let past = pool.take(2).err().unwrap().to_string();
        assert!(past.contains("past the 2 jobs"), "{past}");
        assert_eq!(pool.take(0).unwrap(), 0);
        assert_eq!(pool.take(1).unwrap(), 1);
        assert!(pool.take(0).is_err());
    }

    #[test]
    fn dropping_an_unread_pool_returns() {
        let pool = OrderedPool::new("test pool", 1000, 4, 1, |i| vec![0u8; i]);
        drop(pool);
    }
}
