//! Tables made on the host and uploaded once per device: causal masks, the sinusoidal
//! frequencies of timestep embeddings, rotary angles. A step that uploaded its table at every
//! call would pay the copy each time and could not be captured as a CUDA graph (a capture
//! cannot copy from the host); from the cache, a warm-up step makes the table and the captured
//! step finds it.
//!
//! A table is kept by its kind, the parameters it depends on and its device. The cache holds a
//! few dozen; when it is full one table makes room for the new one, and the capture epoch is
//! bumped so that no recorded graph replays against a freed table (a graph that must outlive
//! that holds `all()`).

use crate::{Device, Result, Tensor};
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, OnceLock};

/// Enough for every shape of a training run and a pipeline's tables at a few resolutions.
const CAPACITY: usize = 64;

type Tables = Mutex<HashMap<(&'static str, u64, Device), Tensor>>;
static TABLES: OnceLock<Tables> = OnceLock::new();

fn tables() -> std::sync::MutexGuard<'static, HashMap<(&'static str, u64, Device), Tensor>> {
    TABLES
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The table of `kind` for `params` on `device`: from the cache, or made by `make` (on the
/// host or anywhere; it is moved to `device`) and kept. Callers read it and never write it.
pub fn cached(
    kind: &'static str,
    params: impl Hash,
    device: Device,
    make: impl FnOnce() -> Result<Tensor>,
) -> Result<Tensor> {
    let mut h = DefaultHasher::new();
    params.hash(&mut h);
    let key = (kind, h.finish(), device);
    if let Some(t) = tables().get(&key) {
        return Ok(t.clone());
    }
    let table = make()?.to_device(device)?;
    let mut tables = tables();
    if !tables.contains_key(&key) && tables.len() >= CAPACITY {
        // One out, not all: a step that makes several tables keeps those it made already.
        if let Some(old) = tables.keys().next().copied() {
            tables.remove(&old);
        }
        crate::capture::bump_epoch();
    }
    // Another thread may have made it meanwhile: keep the first, so no handle goes stale.
    Ok(tables.entry(key).or_insert(table).clone())
}

/// Handles to every cached table: a CUDA graph that read some holds them all, so that no
/// eviction (from any thread) frees one under its replays.
pub fn all() -> Vec<Tensor> {
    tables().values().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn a_table_is_made_once_per_parameters_and_again_for_others() {
        let made = std::sync::atomic::AtomicUsize::new(0);
        let make = |v: f64| {
            made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Tensor::from_f64s(&[v], &[1], DType::F32)
        };
        let a = cached(
            "test table",
            (3usize, 1.5f64.to_bits()),
            Device::Cpu,
            || make(1.0),
        )
        .unwrap();
        let b = cached(
            "test table",
            (3usize, 1.5f64.to_bits()),
            Device::Cpu,
            || make(2.0),
        )
        .unwrap();
        let c = cached(
            "test table",
            (4usize, 1.5f64.to_bits()),
            Device::Cpu,
            || make(3.0),
        )
        .unwrap();
        assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 2);
        assert_eq!(a.to_vec_f32().unwrap(), b.to_vec_f32().unwrap());
        assert_eq!(c.to_vec_f32().unwrap(), vec![3.0]);
    }
}
