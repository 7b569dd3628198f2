//! Reading a few device words back without waiting: a copy into pinned host memory queued
//! behind the work on the stream, with an event the host polls.

use crate::cuda::CudaDevice;
use crate::{Error, Result};
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::sync::Arc;

/// A copy of a few device words into pinned host memory, queued behind the work already on the
/// stream, that the host can pick up later without waiting: the optimizer polls it at each
/// step to notice skipped steps, so no step ever synchronizes.
pub struct Snapshot {
    dev: Arc<CudaDevice>,
    host: *mut i64,
    len: usize,
    event: sys::CUevent,
    in_flight: bool,
}

// SAFETY: the pinned buffer and the event are owned by this value and only touched through
// `&mut self` (or in Drop); the driver calls are valid from any thread once the context is bound.
unsafe impl Send for Snapshot {}

fn driver(what: &'static str) -> impl Fn(result::DriverError) -> Error {
    move |e| Error::Cuda(format!("{what}: {e:?}"))
}

impl Snapshot {
    pub fn new(dev: &Arc<CudaDevice>, len: usize) -> Result<Snapshot> {
        dev.bind()?;
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(driver("cuEventCreate"))?;
        // SAFETY: a fresh pinned allocation of `len` i64s; only read after a copy into it has
        // completed.
        let host = match unsafe { result::malloc_host(len.max(1) * 8, 0) } {
            Ok(p) => p as *mut i64,
            Err(e) => {
                // SAFETY: the event was created above and is not used elsewhere.
                let _ = unsafe { result::event::destroy(event) };
                return Err(driver("cuMemHostAlloc")(e));
            }
        };
        Ok(Snapshot {
            dev: dev.clone(),
            host,
            len,
            event,
            in_flight: false,
        })
    }

    /// Queues a copy of `len` i64s from `src`, unless one is still in flight.
    ///
    /// # Safety
    /// `src` must be a live device buffer of at least `len` i64s on this device.
    pub unsafe fn start(&mut self, src: u64) -> Result<()> {
        if self.in_flight {
            return Ok(());
        }
        self.dev.bind()?;
        sys::cuMemcpyDtoHAsync_v2(
            self.host as *mut c_void,
            src,
            self.len * 8,
            self.dev.stream(),
        )
        .result()
        .map_err(driver("cuMemcpyDtoHAsync"))?;
        result::event::record(self.event, self.dev.stream()).map_err(driver("cuEventRecord"))?;
        self.in_flight = true;
        Ok(())
    }

    /// The words of the last copy once it has landed; `None` while it is still on its way or
    /// when none was queued. Never waits.
    pub fn poll(&mut self) -> Result<Option<Vec<i64>>> {
        if !self.in_flight {
            return Ok(None);
        }
        self.dev.bind()?;
        // SAFETY: the event belongs to this snapshot.
        match unsafe { result::event::query(self.event) } {
            Ok(()) => {}
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => return Ok(None),
            Err(e) => return Err(driver("cuEventQuery")(e)),
        }
        self.in_flight = false;
        // SAFETY: the copy into `host` has completed and nothing writes it until the next start.
        Ok(Some(
            unsafe { std::slice::from_raw_parts(self.host, self.len) }.to_vec(),
        ))
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if self.dev.bind().is_err() {
            return;
        }
        // SAFETY: waits for a copy still landing in `host` before freeing it; both handles are
        // owned here and freed once.
        unsafe {
            if self.in_flight {
                let _ = result::event::synchronize(self.event);
            }
            let _ = result::free_host(self.host as *mut c_void);
            let _ = result::event::destroy(self.event);
        }
    }
}
