//! CUDA graph captures on a device: the capture lane (a second stream and cuBLAS handle), the
//! capture the current thread records, and the refusal of what a graph cannot hold.

use super::*;

impl CudaDevice {
    /// The lane of the capture this thread records on this device, if any. A thread whose
    /// locals are being destroyed records none: tensors held by another thread-local (a
    /// script error on its way up) are freed after this one is gone, at the process's exit.
    pub(super) fn capturing_here(&self) -> Option<(sys::CUstream, blas_sys::cublasHandle_t)> {
        CAPTURE
            .try_with(|c| {
                c.borrow()
                    .as_ref()
                    .filter(|t| t.ordinal == self.ordinal)
                    .map(|t| t.lane)
            })
            .ok()
            .flatten()
    }

    /// Whether this thread is recording a CUDA graph capture on this device: its launches are
    /// recorded, not run, and host reads and waits are refused.
    pub fn capturing(&self) -> bool {
        self.capturing_here().is_some()
    }

    /// An error naming `what` while this thread captures on this device: host copies and
    /// waits cannot be part of a graph.
    pub fn refuse_in_capture(&self, what: &str) -> Result<()> {
        if self.capturing_here().is_some() {
            return Err(Error::Cuda(format!(
                "{what} cannot be captured into a CUDA graph; the captured work must stay on the device"
            )));
        }
        Ok(())
    }

    /// The capture lane, locked for one capture (made on first use): a second capture on the
    /// device waits for the first to end.
    pub(crate) fn capture_lane(&self) -> Result<std::sync::MutexGuard<'_, Option<CaptureLane>>> {
        self.bind()?;
        if self.capturing_here().is_some() {
            return Err(Error::Cuda(
                "a CUDA graph capture cannot start inside another capture".into(),
            ));
        }
        let mut lane = self.capture_lane.lock().unwrap_or_else(|e| e.into_inner());
        if lane.is_none() {
            let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
                .map_err(driver_err("cuStreamCreate"))?;
            // SAFETY: a new handle bound to the new stream, with its own workspace, kept for the
            // life of the process like the device's.
            let blas = unsafe {
                let h = blas::create_handle()
                    .map_err(|e| Error::Cuda(format!("cublasCreate: {e:?}")))?;
                blas::set_stream(h, stream as _)
                    .map_err(|e| Error::Cuda(format!("cublasSetStream: {e:?}")))?;
                let workspace = self.alloc(BLAS_WORKSPACE)?;
                blas_sys::cublasSetWorkspace_v2(h, workspace as *mut c_void, BLAS_WORKSPACE)
                    .result()
                    .map_err(|e| Error::Cuda(format!("cublasSetWorkspace: {e:?}")))?;
                h
            };
            *lane = Some(CaptureLane { stream, blas });
        }
        Ok(lane)
    }

    /// From now on this thread's work on this device goes to `lane` and its allocations are
    /// tracked (`graph.rs` begins the stream capture right after).
    pub(crate) fn start_capture_tracking(&self, lane: &CaptureLane) {
        CAPTURE.with(|c| {
            *c.borrow_mut() = Some(ThreadCapture {
                ordinal: self.ordinal,
                lane: (lane.stream, lane.blas),
                made: HashSet::new(),
                deferred_frees: Vec::new(),
            })
        });
    }

    /// Stops tracking, frees the blocks whose owners were dropped during the capture, and
    /// returns what the capture allocated and did not free.
    pub(crate) fn finish_capture_tracking(&self) -> HashSet<sys::CUdeviceptr> {
        let Some(t) = CAPTURE.with(|c| c.borrow_mut().take()) else {
            return HashSet::new();
        };
        for (ptr, bytes) in t.deferred_frees {
            self.free(ptr, bytes);
        }
        t.made
    }
}
