//! Data-parallel runs: which rank this process is, of how many, and the rendezvous they share.
//!
//! `brain launch --gpus N` starts one process per GPU and tells each, through its environment,
//! its rank (`RB_RANK`), the world size (`RB_WORLD_SIZE`) and the rendezvous directory the
//! launcher owns (`RB_DIST_DIR`), as torchrun does with its `env://` variables. A process
//! started any other way is rank 0 of 1: every distributed call works, and does nothing.
//!
//! The rendezvous is a [`FileStore`]: small values by key (the NCCL unique id, rank 0 to the
//! others) and barriers. The gradients' all-reduce goes through NCCL, in [`buckets`] planned
//! here.

pub mod buckets;
mod reduce;
mod store;
pub mod zero;

pub use reduce::GradReducer;
pub use store::FileStore;

use crate::backend::cuda::nccl::{self, Communicator};
use crate::{Error, Result};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The environment variables the launcher sets.
pub const RANK_VAR: &str = "RB_RANK";
pub const WORLD_SIZE_VAR: &str = "RB_WORLD_SIZE";
pub const DIR_VAR: &str = "RB_DIST_DIR";
/// Seconds a rank waits at a barrier or for a key before it gives up (default 1800: the
/// other ranks may be compiling kernels or loading a large checkpoint).
pub const TIMEOUT_VAR: &str = "RB_DIST_TIMEOUT";

/// This process's place in a run.
pub struct Dist {
    pub rank: usize,
    pub world_size: usize,
    /// The rendezvous; `None` for a run of one.
    store: Option<FileStore>,
    /// The NCCL communicator, once made, with its device ordinal.
    comm: Mutex<Option<(usize, Arc<Communicator>)>>,
    /// Calls of `on_main` so far; every rank counts the same sequence.
    main_calls: AtomicU64,
}

impl std::fmt::Debug for Dist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dist")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("store", &self.store)
            .finish()
    }
}

impl Dist {
    /// Rank 0 of 1: a process not started by the launcher.
    pub fn single() -> Dist {
        Dist {
            rank: 0,
            world_size: 1,
            store: None,
            comm: Mutex::new(None),
            main_calls: AtomicU64::new(0),
        }
    }

    /// From the launcher's variables, read through `var`; rank 0 of 1 when none is set. A
    /// partial or inconsistent set is an error that names the variable.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Dist> {
        let (rank, world, dir) = (var(RANK_VAR), var(WORLD_SIZE_VAR), var(DIR_VAR));
        if rank.is_none() && world.is_none() && dir.is_none() {
            return Ok(Dist::single());
        }
        let number = |name: &str, value: Option<String>| -> Result<usize> {
            let value = value.ok_or_else(|| {
                Error::invalid(
                    "dist",
                    format!(
                        "{name} is not set, but other variables of `brain launch` are \
                         ({RANK_VAR}, {WORLD_SIZE_VAR} and {DIR_VAR} go together)"
                    ),
                )
            })?;
            value.trim().parse().map_err(|_| {
                Error::invalid("dist", format!("{name}={value:?} is not a whole number"))
            })
        };
        let rank = number(RANK_VAR, rank)?;
        let world_size = number(WORLD_SIZE_VAR, world)?;
        if world_size == 0 || rank >= world_size {
            return Err(Error::invalid(
                "dist",
                format!("rank {rank} does not fit a world of {world_size}"),
            ));
        }
        let dir = dir.filter(|d| !d.is_empty()).ok_or_else(|| {
            Error::invalid("dist", format!("{DIR_VAR} is not set (the rendezvous)"))
        })?;
        let timeout = match var(TIMEOUT_VAR) {
            None => Duration::from_secs(1800),
            Some(s) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|t| *t > 0.0)
                .and_then(|t| Duration::try_from_secs_f64(t).ok())
                .ok_or_else(|| {
                    Error::invalid("dist", format!("{TIMEOUT_VAR}={s:?} is not seconds"))
                })?,
        };
        Ok(Dist {
            rank,
            world_size,
            store: Some(FileStore::new(
                PathBuf::from(dir),
                rank,
                world_size,
                timeout,
            )?),
            comm: Mutex::new(None),
            main_calls: AtomicU64::new(0),
        })
    }

    /// Rank 0 prints, plots and writes checkpoints.
    pub fn is_main(&self) -> bool {
        self.rank == 0
    }

    /// Runs `work` on rank 0 only (writing a checkpoint, say); every rank returns once it is
    /// done, and a failure there is every rank's error, so no rank goes on as if the file were
    /// written. Every rank calls it, in the same order; `before` is what this rank did first
    /// as its part (a gather), reported instead when it failed, after the barrier all the same.
    pub fn on_main(&self, before: Result<()>, work: impl FnOnce() -> Result<()>) -> Result<()> {
        let Some(store) = &self.store else {
            return before.and_then(|()| work());
        };
        let key = format!("main-{}", self.main_calls.fetch_add(1, Ordering::SeqCst));
        if self.is_main() {
            let done = before.and_then(|()| work());
            let outcome = match &done {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("err:{e}"),
            };
            // Published before the barrier, so every rank finds it once past it.
            let published = store.set(&key, outcome.as_bytes());
            store.barrier()?;
            return done.and(published);
        }
        store.barrier()?;
        before?;
        // Rank 0 published before the barrier: what is not there now never will be.
        let outcome = store.try_get(&key)?.ok_or_else(|| {
            Error::invalid(
                "dist",
                "rank 0 could not publish whether its work succeeded",
            )
        })?;
        let outcome = String::from_utf8_lossy(&outcome);
        match outcome.strip_prefix("err:") {
            None if outcome == "ok" => Ok(()),
            Some(e) => Err(Error::invalid("dist", format!("rank 0 failed: {e}"))),
            None => Err(Error::invalid(
                "dist",
                format!("rank 0's outcome {outcome:?} is neither ok nor an error"),
            )),
        }
    }

    /// Waits until every rank has called `barrier` as many times as this one.
    pub fn barrier(&self) -> Result<()> {
        match &self.store {
            Some(store) => store.barrier(),
            None => Ok(()),
        }
    }

    /// The rendezvous of a run of several; `None` for a run of one.
    pub fn store(&self) -> Option<&FileStore> {
        self.store.as_ref()
    }

    /// The NCCL communicator of this run on CUDA device `ordinal`, made on first use: rank 0
    /// makes the unique id and publishes it in the rendezvous, and every rank joins with it.
    /// A run of one joins a communicator of one, through the same calls.
    pub fn communicator(&self, ordinal: usize) -> Result<Arc<Communicator>> {
        let mut slot = self.comm.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((o, c)) = slot.as_ref() {
            if *o == ordinal {
                return Ok(c.clone());
            }
            return Err(Error::invalid(
                "dist",
                format!("this rank's communicator is on cuda:{o}, not cuda:{ordinal}"),
            ));
        }
        let id = share_unique_id(self.store.as_ref(), self.rank, nccl::unique_id)?;
        let dev = crate::backend::cuda::device(ordinal)?;
        let comm = Arc::new(Communicator::join(&dev, &id, self.rank, self.world_size)?);
        *slot = Some((ordinal, comm.clone()));
        Ok(comm)
    }
}

/// The store key of the NCCL unique id.
const NCCL_ID_KEY: &str = "nccl_id";

/// Rank 0's unique id (made by `make`) for every rank: rank 0 publishes it, the others wait for
/// it. Without a store (a run of one) it is made here.
fn share_unique_id(
    store: Option<&FileStore>,
    rank: usize,
    make: impl FnOnce() -> Result<[u8; nccl::UNIQUE_ID_BYTES]>,
) -> Result<[u8; nccl::UNIQUE_ID_BYTES]> {
    let Some(store) = store else {
        return make();
    };
    if rank == 0 {
        let id = make()?;
        store.set(NCCL_ID_KEY, &id)?;
        return Ok(id);
    }
    let bytes = store.get(NCCL_ID_KEY)?;
    bytes.as_slice().try_into().map_err(|_| {
        Error::invalid(
            "dist",
            format!(
                "the NCCL id in the rendezvous has {} bytes, not {}",
                bytes.len(),
                nccl::UNIQUE_ID_BYTES
            ),
        )
    })
}

/// The YOLO trainer calls this first. Under `brain launch` with more than one rank it would
/// train one model per rank on its own, because it does not reduce its gradients across ranks
/// yet (`train_step` does). That result would be wrong without anything saying so, so it is
/// an error. Scripts that write their own loop are unaffected: for them, each rank on its own
/// is what they wrote.
pub fn refuse_unsynchronized_training(op: &'static str) -> Result<()> {
    let d = current()?;
    if d.world_size > 1 {
        return Err(Error::invalid(
            op,
            format!(
                "this is rank {} of {} under `brain launch`, but this trainer does not average \
                 gradients across ranks yet, so each rank would train a model of its own; run \
                 the script with `brain run`",
                d.rank, d.world_size
            ),
        ));
    }
    Ok(())
}

/// This process's `Dist`, read from the environment once. An inconsistent environment is an
/// error every time it is asked for, not a panic.
pub fn current() -> Result<&'static Dist> {
    static DIST: OnceLock<std::result::Result<Dist, String>> = OnceLock::new();
    DIST.get_or_init(|| Dist::from_vars(|name| std::env::var(name).ok()).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| Error::invalid("dist", e.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn rank_zero_makes_the_nccl_id_and_the_others_read_it() {
        let dir = tempfile::tempdir().unwrap();
        let others: Vec<_> = (1..3)
            .map(|rank| {
                let dir = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    let store = FileStore::new(dir, rank, 3, Duration::from_secs(10)).unwrap();
                    share_unique_id(Some(&store), rank, || panic!("only rank 0 makes it")).unwrap()
                })
            })
            .collect();
        let store = FileStore::new(dir.path().into(), 0, 3, Duration::from_secs(10)).unwrap();
        let id = share_unique_id(Some(&store), 0, || Ok([42u8; nccl::UNIQUE_ID_BYTES])).unwrap();
        for t in others {
            assert_eq!(t.join().unwrap(), id);
        }
        // Alone, the id is made here.
        let alone = share_unique_id(None, 0, || Ok([1u8; nccl::UNIQUE_ID_BYTES])).unwrap();
        assert_eq!(alone, [1u8; nccl::UNIQUE_ID_BYTES]);
    }

    /// Rank 0's work fails: it gets its own error, and rank 1, which did nothing, returns
    /// after it with that error named, instead of going on as if the work were done. The next
    /// call starts clean.
    #[test]
    fn a_failure_on_rank_zero_is_every_rank_s_error() {
        let dir = tempfile::tempdir().unwrap();
        let dist = |rank: usize| {
            let path = dir.path().to_str().unwrap().to_string();
            Dist::from_vars(move |name| match name {
                RANK_VAR => Some(rank.to_string()),
                WORLD_SIZE_VAR => Some("2".into()),
                DIR_VAR => Some(path.clone()),
                // A regression fails the test in seconds instead of hanging it.
                TIMEOUT_VAR => Some("10".into()),
                _ => None,
            })
            .unwrap()
        };
        let other = dist(1);
        let rank1 = std::thread::spawn(move || {
            let first = other.on_main(Ok(()), || panic!("only rank 0 works"));
            let second = other.on_main(Ok(()), || panic!("only rank 0 works"));
            (first, second)
        });
        let main = dist(0);
        let failed = main.on_main(Ok(()), || Err(Error::invalid("save", "disk full")));
        assert!(failed.unwrap_err().to_string().contains("disk full"));
        main.on_main(Ok(()), || Ok(())).unwrap();
        let (first, second) = rank1.join().unwrap();
        let err = first.unwrap_err().to_string();
        assert!(
            err.contains("rank 0 failed") && err.contains("disk full"),
            "{err}"
        );
        second.unwrap();
    }

    /// Rank 0 passes the barrier without publishing an outcome (its store could not be
    /// written): rank 1 says so at once instead of waiting for a value that cannot come.
    #[test]
    fn an_outcome_rank_zero_never_published_is_an_error_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let rank0 = std::thread::spawn(move || {
            FileStore::new(path, 0, 2, Duration::from_secs(10))
                .unwrap()
                .barrier()
                .unwrap()
        });
        let path = dir.path().to_str().unwrap().to_string();
        let rank1 = Dist::from_vars(move |name| match name {
            RANK_VAR => Some("1".into()),
            WORLD_SIZE_VAR => Some("2".into()),
            DIR_VAR => Some(path.clone()),
            TIMEOUT_VAR => Some("600".into()),
            _ => None,
        })
        .unwrap();
        let started = std::time::Instant::now();
        let err = rank1
            .on_main(Ok(()), || panic!("only rank 0 works"))
            .unwrap_err();
        rank0.join().unwrap();
        assert!(err.to_string().contains("could not publish"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn no_launcher_variables_is_rank_zero_of_one() {
        let d = Dist::from_vars(vars(&[])).unwrap();
        assert_eq!((d.rank, d.world_size, d.is_main()), (0, 1, true));
        d.barrier().unwrap();
        assert!(d.store().is_none());
    }

    #[test]
    fn the_launcher_variables_give_rank_and_world() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap();
        let d = Dist::from_vars(vars(&[
            (RANK_VAR, "1"),
            (WORLD_SIZE_VAR, "2"),
            (DIR_VAR, path),
        ]))
        .unwrap();
        assert_eq!((d.rank, d.world_size, d.is_main()), (1, 2, false));
        assert!(d.store().is_some());
    }

    #[test]
    fn a_partial_or_inconsistent_environment_is_an_error_naming_it() {
        let e = Dist::from_vars(vars(&[(RANK_VAR, "0")])).unwrap_err();
        assert!(e.to_string().contains(WORLD_SIZE_VAR), "{e}");
        let e = Dist::from_vars(vars(&[
            (RANK_VAR, "2"),
            (WORLD_SIZE_VAR, "2"),
            (DIR_VAR, "/tmp"),
        ]))
        .unwrap_err();
        assert!(
            e.to_string().contains("rank 2 does not fit a world of 2"),
            "{e}"
        );
        let e = Dist::from_vars(vars(&[
            (RANK_VAR, "one"),
            (WORLD_SIZE_VAR, "2"),
            (DIR_VAR, "/tmp"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("RB_RANK=\"one\""), "{e}");
        let e = Dist::from_vars(vars(&[(RANK_VAR, "0"), (WORLD_SIZE_VAR, "2")])).unwrap_err();
        assert!(e.to_string().contains(DIR_VAR), "{e}");
    }
}
