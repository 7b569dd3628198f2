//! The ranks' rendezvous: a directory the launcher owns, in which each rank writes small files
//! (a key's value, its arrival at a barrier) and waits for the others'. It carries a few bytes
//! a run (the NCCL unique id, barriers around checkpoints), so polling the file system is
//! cheap enough, and it needs no port, no server and nothing beyond the launcher's host.

use crate::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct FileStore {
    dir: PathBuf,
    rank: usize,
    world_size: usize,
    timeout: Duration,
    /// Barriers passed so far by this rank; every rank counts the same sequence.
    barriers: AtomicU64,
}

impl FileStore {
    /// The store in `dir` (created if missing) as seen by `rank` of `world_size`.
    pub fn new(
        dir: PathBuf,
        rank: usize,
        world_size: usize,
        timeout: Duration,
    ) -> Result<FileStore> {
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        Ok(FileStore {
            dir,
            rank,
            world_size,
            timeout,
            barriers: AtomicU64::new(0),
        })
    }

    /// Publishes `value` under `key` for every rank (written whole, then renamed into place,
    /// so a reader never sees half of it).
    pub fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let path = self.key_path(key)?;
        let tmp = path.with_extension(format!("tmp-{}", self.rank));
        std::fs::write(&tmp, value).map_err(|e| io_error(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io_error(&path, e))
    }

    /// The value under `key`, waiting for a rank to `set` it.
    pub fn get(&self, key: &str) -> Result<Vec<u8>> {
        let path = self.key_path(key)?;
        self.wait(
            || Ok(path.exists()),
            || format!("the value `{key}` from another rank"),
        )?;
        std::fs::read(&path).map_err(|e| io_error(&path, e))
    }

    /// The value under `key` if a rank has set it, without waiting.
    pub fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let path = self.key_path(key)?;
        match std::fs::read(&path) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(&path, e)),
        }
    }

    /// Returns once every rank has called `barrier` as many times as this one has.
    pub fn barrier(&self) -> Result<()> {
        let n = self.barriers.fetch_add(1, Ordering::SeqCst) + 1;
        let dir = self.dir.join(format!("barrier-{n}"));
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        let mine = dir.join(self.rank.to_string());
        std::fs::write(&mine, b"").map_err(|e| io_error(&mine, e))?;
        let arrived = |dir: &Path| -> Vec<bool> {
            (0..self.world_size)
                .map(|r| dir.join(r.to_string()).exists())
                .collect()
        };
        self.wait(
            || Ok(arrived(&dir).iter().all(|&a| a)),
            || {
                let missing: Vec<usize> = arrived(&dir)
                    .iter()
                    .enumerate()
                    .filter(|(_, &a)| !a)
                    .map(|(r, _)| r)
                    .collect();
                format!("barrier {n}: ranks {missing:?} to arrive")
            },
        )
    }

    fn key_path(&self, key: &str) -> Result<PathBuf> {
        let ok = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            return Err(Error::invalid(
                "dist store",
                format!("key {key:?}: use letters, digits, '_' and '-'"),
            ));
        }
        Ok(self.dir.join(format!("key-{key}")))
    }

    /// Polls `done` (1 ms at first, backing off to 20 ms) until it holds, Ctrl-C asks to stop,
    /// or the timeout passes; the timeout's error says what was awaited.
    fn wait(
        &self,
        mut done: impl FnMut() -> Result<bool>,
        awaited: impl Fn() -> String,
    ) -> Result<()> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        while !done()? {
            crate::cancel::check()?;
            if start.elapsed() > self.timeout {
                return Err(Error::invalid(
                    "dist",
                    format!(
                        "rank {} waited {:.0} s for {} (the timeout is {} in seconds)",
                        self.rank,
                        self.timeout.as_secs_f64(),
                        awaited(),
                        super::TIMEOUT_VAR
                    ),
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        Ok(())
    }
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::invalid("dist store", format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    fn store(dir: &Path, rank: usize, world: usize, timeout_ms: u64) -> FileStore {
        FileStore::new(
            dir.to_path_buf(),
            rank,
            world,
            Duration::from_millis(timeout_ms),
        )
        .unwrap()
    }

    #[test]
    fn no_rank_passes_a_barrier_before_the_last_arrives() {
        let dir = tempfile::tempdir().unwrap();
        let arrived = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..3)
            .map(|rank| {
                let (dir, arrived) = (dir.path().to_path_buf(), arrived.clone());
                std::thread::spawn(move || {
                    let s = store(&dir, rank, 3, 10_000);
                    for round in 1..=3 {
                        // The last rank is late each round.
                        if rank == 2 {
                            std::thread::sleep(Duration::from_millis(30));
                        }
                        arrived.fetch_add(1, Ordering::SeqCst);
                        s.barrier().unwrap();
                        assert!(arrived.load(Ordering::SeqCst) >= 3 * round, "rank {rank}");
                        s.barrier().unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn a_value_set_by_one_rank_reaches_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let reader = {
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || store(&dir, 1, 2, 10_000).get("nccl_id").unwrap())
        };
        std::thread::sleep(Duration::from_millis(20));
        store(dir.path(), 0, 2, 10_000)
            .set("nccl_id", &[7u8; 128])
            .unwrap();
        assert_eq!(reader.join().unwrap(), vec![7u8; 128]);
    }

    #[test]
    fn a_barrier_nobody_else_reaches_times_out_naming_the_missing_ranks() {
        let dir = tempfile::tempdir().unwrap();
        let e = store(dir.path(), 0, 3, 50)
            .barrier()
            .unwrap_err()
            .to_string();
        assert!(e.contains("barrier 1: ranks [1, 2] to arrive"), "{e}");
        assert!(e.contains("rank 0 waited"), "{e}");
    }

    #[test]
    fn a_key_with_a_path_in_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = store(dir.path(), 0, 1, 50).set("../x", b"1").unwrap_err();
        assert!(e.to_string().contains("key \"../x\""), "{e}");
    }
}
