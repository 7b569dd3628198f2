//! Reading device bytes back without a stream-wide wait: a copy into pinned host memory queued
//! behind the work on the stream, with an event of its own that the host polls, or waits on
//! alone while later work keeps running.

use crate::cuda::CudaDevice;
use crate::{Error, Result};
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::sync::Arc;

/// A copy of up to `capacity` device bytes into pinned host memory, queued behind the work
/// already on the stream. The optimizer polls one at each step to notice skipped steps; a
/// training loop waits on one for its loss while the backward it queued after runs on.
pub struct Readback {
    dev: Arc<CudaDevice>,
    host: *mut u8,
    capacity: usize,
    /// Bytes of the copy in flight (or landed and not yet taken).
    len: usize,
    event: sys::CUevent,
    in_flight: bool,
}

// SAFETY: the pinned buffer and the event are owned by this value and only touched through
// `&mut self` (or in Drop); the driver calls are valid from any thread once the context is bound.
unsafe impl Send for Readback {}

fn driver(what: &'static str) -> impl Fn(result::DriverError) -> Error {
    move |e| Error::Cuda(format!("{what}: {e:?}"))
}

impl Readback {
    pub fn new(dev: &Arc<CudaDevice>, capacity: usize) -> Result<Readback> {
        dev.bind()?;
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(driver("cuEventCreate"))?;
        // SAFETY: a fresh pinned allocation; only read after a copy into it has completed.
        let host = match unsafe { result::malloc_host(capacity.max(1), 0) } {
            Ok(p) => p as *mut u8,
            Err(e) => {
                // SAFETY: the event was created above and is not used elsewhere.
                let _ = unsafe { result::event::destroy(event) };
                return Err(driver("cuMemHostAlloc")(e));
            }
        };
        Ok(Readback {
            dev: dev.clone(),
            host,
            capacity,
            len: 0,
            event,
            in_flight: false,
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Queues a copy of `bytes` bytes from `src`, unless one is still in flight (then this
    /// does nothing and returns false).
    ///
    /// # Safety
    /// `src` must be a live device buffer of at least `bytes` bytes on this device.
    pub unsafe fn start(&mut self, src: u64, bytes: usize) -> Result<bool> {
        if self.in_flight {
            return Ok(false);
        }
        if bytes > self.capacity {
            return Err(Error::Cuda(format!(
                "a readback of {bytes} bytes into a buffer of {}",
                self.capacity
            )));
        }
        self.dev.refuse_in_capture("a device-to-host readback")?;
        self.dev.bind()?;
        sys::cuMemcpyDtoHAsync_v2(self.host as *mut c_void, src, bytes, self.dev.stream())
            .result()
            .map_err(driver("cuMemcpyDtoHAsync"))?;
        result::event::record(self.event, self.dev.stream()).map_err(driver("cuEventRecord"))?;
        self.len = bytes;
        self.in_flight = true;
        Ok(true)
    }

    /// The bytes of the last copy once it has landed; `None` while it is still on its way or
    /// when none was queued. Never waits.
    pub fn poll(&mut self) -> Result<Option<Vec<u8>>> {
        if !self.in_flight {
            return Ok(None);
        }
        self.dev.bind()?;
        // SAFETY: the event belongs to this readback.
        match unsafe { result::event::query(self.event) } {
            Ok(()) => {}
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => return Ok(None),
            Err(e) => return Err(driver("cuEventQuery")(e)),
        }
        Ok(Some(self.take()))
    }

    /// The bytes of the last copy, waiting for that copy alone (work queued after it keeps
    /// running); `None` when none was queued. A bad index met by a kernel is reported at the
    /// next synchronization, not here.
    pub fn wait(&mut self) -> Result<Option<Vec<u8>>> {
        if !self.in_flight {
            return Ok(None);
        }
        self.dev.bind()?;
        // SAFETY: the event belongs to this readback.
        unsafe { result::event::synchronize(self.event) }.map_err(driver("cuEventSynchronize"))?;
        Ok(Some(self.take()))
    }

    fn take(&mut self) -> Vec<u8> {
        self.in_flight = false;
        // SAFETY: the copy into `host` has completed and nothing writes it until the next start.
        unsafe { std::slice::from_raw_parts(self.host, self.len) }.to_vec()
    }
}

impl Drop for Readback {
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
