//! The temporary file of an atomic save: written beside its target as `.{name}.tmp-{pid}-{n}`,
//! then renamed over it, so a reader never sees half a file. A save that is killed (Ctrl-C
//! twice, the OOM killer, a power cut) cannot remove its temp, which may be as large as the
//! model; so every new save of a target first removes the temps of that target that no live
//! writer owns: those of processes that have ended, and those of this process that no
//! `TempFile` holds any more. Temps of other running processes are left alone.

use crate::{Error, Result};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Temps this process is writing now (another thread's save of the same target must not lose
/// its temp to our cleanup).
static LIVE: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// Writes `bytes` to a temporary file beside `path` and renames it over `path`, so a reader
/// never sees a half-written file and a crash leaves the old one intact.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    create_parent(path)?;
    let tmp = TempFile::beside(path);
    std::fs::write(tmp.path(), bytes).map_err(|e| Error::io(tmp.path(), e))?;
    tmp.persist(path)
}

/// Makes the folder `path` goes in, so `out/tokenizer.json` works on a fresh checkout.
pub(crate) fn create_parent(path: &Path) -> Result<()> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e)),
        None => Ok(()),
    }
}

fn live() -> std::sync::MutexGuard<'static, Option<HashSet<PathBuf>>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A temp file beside a target; removed when dropped unless `persist` renamed it.
pub struct TempFile {
    path: PathBuf,
    persisted: bool,
}

impl TempFile {
    /// A fresh temp name beside `target`, after removing the temps that killed saves of
    /// `target` left. Nothing is created yet: the caller writes `path()`.
    pub fn beside(target: &Path) -> TempFile {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = target.with_file_name(format!("{}{}-{n}", prefix(target), std::process::id()));
        let mut set = live();
        remove_stale(target, set.get_or_insert_with(HashSet::new));
        set.get_or_insert_with(HashSet::new).insert(path.clone());
        TempFile {
            path,
            persisted: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the temp over `target`; on failure the temp is removed.
    pub fn persist(mut self, target: &Path) -> Result<()> {
        std::fs::rename(&self.path, target).map_err(|e| Error::io(target, e))?;
        self.persisted = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.persisted {
            let _ = std::fs::remove_file(&self.path);
        }
        if let Some(set) = live().as_mut() {
            set.remove(&self.path);
        }
    }
}

/// `.{name}.tmp-`: what every temp of `target` starts with.
fn prefix(target: &Path) -> String {
    let name = target
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    format!(".{name}.tmp-")
}

/// Removes temps of `target` whose writer is gone. Best effort: a directory that cannot be
/// listed, or a temp that cannot be removed, is left as it is.
fn remove_stale(target: &Path, live: &HashSet<PathBuf>) {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = prefix(target);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let path = entry.path();
        let abandoned = if pid == std::process::id() {
            !live.contains(&path)
        } else {
            process_is_gone(pid)
        };
        if abandoned {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Whether no process `pid` runs now. Without `/proc` this cannot be told, and the temp is
/// kept.
fn process_is_gone(pid: u32) -> bool {
    let proc = Path::new("/proc");
    proc.join("self").exists() && !proc.join(pid.to_string()).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temps_of(target: &Path) -> Vec<String> {
        let prefix = prefix(target);
        let mut names: Vec<String> = std::fs::read_dir(target.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_new_save_removes_the_temps_that_killed_saves_left() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("model.safetensors");
        // A dead writer (pid 0 is never a user process), an orphan of this process, and a
        // live writer's temp (this process, held), plus another target's temp.
        let dead = dir.path().join(".model.safetensors.tmp-0-3");
        let orphan = dir.path().join(format!(
            ".model.safetensors.tmp-{}-999999",
            std::process::id()
        ));
        let other = dir.path().join(".other.safetensors.tmp-0-1");
        for p in [&dead, &orphan, &other] {
            std::fs::write(p, b"partial").unwrap();
        }
        let held = TempFile::beside(&target);
        std::fs::write(held.path(), b"in progress").unwrap();
        assert_eq!(
            temps_of(&target),
            [held.path().file_name().unwrap().to_string_lossy()]
        );
        assert!(
            other.exists(),
            "another target's temp is not ours to remove"
        );
        // A second save while the first is still writing keeps the first one's temp.
        let second = TempFile::beside(&target);
        assert!(held.path().exists());
        std::fs::write(second.path(), b"x").unwrap();
        second.persist(&target).unwrap();
        drop(held);
        assert!(temps_of(&target).is_empty());
        assert_eq!(std::fs::read(&target).unwrap(), b"x");
    }
}
