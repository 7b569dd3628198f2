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
mod store;

pub use store::FileStore;

use crate::{Error, Result};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// The environment variables the launcher sets.
pub const RANK_VAR: &str = "RB_RANK";
pub const WORLD_SIZE_VAR: &str = "RB_WORLD_SIZE";
pub const DIR_VAR: &str = "RB_DIST_DIR";
/// Seconds a rank waits at a barrier or for a key before it gives up (default 1800: the
/// other ranks may be compiling kernels or loading a large checkpoint).
pub const TIMEOUT_VAR: &str = "RB_DIST_TIMEOUT";

/// This process's place in a run.
#[derive(Debug)]
pub struct Dist {
    pub rank: usize,
    pub world_size: usize,
    /// The rendezvous; `None` for a run of one.
    store: Option<FileStore>,
}

impl Dist {
    /// Rank 0 of 1: a process not started by the launcher.
    pub fn single() -> Dist {
        Dist {
            rank: 0,
            world_size: 1,
            store: None,
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
            Some(s) => Duration::from_secs_f64(
                s.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|t| t.is_finite() && *t > 0.0)
                    .ok_or_else(|| {
                        Error::invalid("dist", format!("{TIMEOUT_VAR}={s:?} is not seconds"))
                    })?,
            ),
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
        })
    }

    /// Rank 0 prints, plots and writes checkpoints.
    pub fn is_main(&self) -> bool {
        self.rank == 0
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
}

/// The trainers (`train_step`, the YOLO trainer) call this first. Under `brain launch` with
/// more than one rank, they would train one model per rank on its own, because the gradients
/// are not averaged across ranks yet. That result would be wrong without anything saying so,
/// so it is an error until the all-reduce exists. Scripts that write their own loop are
/// unaffected: for them, each rank on its own is what they wrote.
pub fn refuse_unsynchronized_training(op: &'static str) -> Result<()> {
    let d = current()?;
    if d.world_size > 1 {
        return Err(Error::invalid(
            op,
            format!(
                "this is rank {} of {} under `brain launch`, but this build does not average \
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
