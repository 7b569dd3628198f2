//! A process-wide cancel flag. The host's Ctrl-C handler sets it; long engine loops (training
//! steps, generation, data passes) check it between iterations and stop with `Error::Cancelled`,
//! because a script engine's own progress hook only runs between script operations.

use std::sync::atomic::{AtomicBool, Ordering};

static CANCEL: AtomicBool = AtomicBool::new(false);

pub fn request() {
    CANCEL.store(true, Ordering::SeqCst);
}

pub fn is_requested() -> bool {
    CANCEL.load(Ordering::Relaxed)
}

/// Clears the flag; returns whether it was set.
pub fn clear() -> bool {
    CANCEL.swap(false, Ordering::SeqCst)
}

/// `Err(Cancelled)` once a cancel was requested.
pub fn check() -> crate::Result<()> {
    if is_requested() {
        Err(crate::Error::Cancelled)
    } else {
        Ok(())
    }
}
