//! CUDA graphs: a run of work on the device's stream recorded once and replayed with one launch.
//! A decode step of a language model is a few hundred small kernels whose launch costs exceed
//! their run time; replaying them as a graph removes the host from the step.
//!
//! The capturing thread records on its own stream (the device's capture lane), so other
//! threads using the device meanwhile are neither captured nor blocked; replays run on the
//! device's stream, in order with everything else.
//!
//! What a captured closure may do: launch kernels, call cuBLAS, allocate and free device
//! memory (the allocations become the graph's own, at the same addresses in every replay).
//! What it may not: copy from or to the host, or wait for the device. The device refuses those
//! with an error while capturing, so a capture fails cleanly instead of recording a copy from a
//! host buffer that is gone by the replay. Everything the closure allocates must also be freed
//! in it: inputs and outputs live in buffers made before the capture, which the replays read
//! and overwrite in place.

use super::device::order_after;
use super::CudaDevice;
use crate::{Error, Result};
use cudarc::driver::sys;
use std::sync::Arc;

/// A captured, instantiated graph, replayed on its device's stream.
pub struct CudaGraph {
    device: Arc<CudaDevice>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

// SAFETY: the graph handles are owned by this value and used under the device's one stream,
// as every other launch is.
unsafe impl Send for CudaGraph {}
unsafe impl Sync for CudaGraph {}

fn check(what: &str, r: sys::CUresult) -> Result<()> {
    r.result()
        .map_err(|e| Error::Cuda(format!("{what}: {e:?}")))
}

impl CudaGraph {
    /// Records what `work` queues on `device`'s stream, without running it.
    pub fn capture(device: &Arc<CudaDevice>, work: impl FnOnce() -> Result<()>) -> Result<Self> {
        let lane_guard = device.capture_lane()?;
        let lane = lane_guard.as_ref().expect("capture_lane makes the lane");
        let stream = lane.stream;
        // The capture lane starts after the work already queued on the device's stream (a
        // plain wait, before the capture begins, so it is not part of the graph).
        order_after(device.main_stream(), stream)?;
        device.start_capture_tracking(lane);
        // SAFETY: the stream belongs to the bound context. Thread-local mode: calls that are
        // unsafe during a capture fail on this thread instead of corrupting it silently.
        let begun = unsafe {
            sys::cuStreamBeginCapture_v2(
                stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        };
        if let Err(e) = check("cuStreamBeginCapture", begun) {
            device.finish_capture_tracking();
            return Err(e);
        }
        // A panic in `work` still ends the capture and the tracking before it goes on, so the
        // thread does not stay in capture mode with its work going to the lane.
        let worked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above on the same stream.
        let ended = check("cuStreamEndCapture", unsafe {
            sys::cuStreamEndCapture(stream, &mut graph)
        });
        let leftover = device.finish_capture_tracking();
        // A graph that is given up never runs: the blocks it made and did not free exist in no
        // memory, and whoever holds them frees them as accounting only.
        let destroy = |g: sys::CUgraph| {
            device.forget_graph_blocks(&leftover);
            if !g.is_null() {
                // SAFETY: `g` came from cuStreamEndCapture and is destroyed once.
                unsafe { sys::cuGraphDestroy(g) };
            }
        };
        let worked = match worked {
            Ok(w) => w,
            Err(panic) => {
                destroy(graph);
                drop(lane_guard);
                std::panic::resume_unwind(panic);
            }
        };
        if let Err(e) = worked.and(ended) {
            destroy(graph);
            return Err(e);
        }
        if !leftover.is_empty() {
            destroy(graph);
            return Err(Error::Cuda(format!(
                "{} device buffer(s) made during the CUDA graph capture outlive it; a captured step must write its results into buffers made before the capture",
                leftover.len()
            )));
        }
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: `graph` is a complete captured graph of this context.
        if let Err(e) = check("cuGraphInstantiate", unsafe {
            sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0)
        }) {
            destroy(graph);
            return Err(e);
        }
        Ok(CudaGraph {
            device: device.clone(),
            graph,
            exec,
        })
    }

    /// Queues one replay on the device's stream (asynchronous, like any launch).
    pub fn replay(&self) -> Result<()> {
        self.device.bind()?;
        // SAFETY: the executable graph belongs to this device's context and stream.
        check("cuGraphLaunch", unsafe {
            sys::cuGraphLaunch(self.exec, self.device.main_stream())
        })
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        if self.device.bind().is_err() {
            return;
        }
        // SAFETY: both handles are owned here and destroyed once; the stream is drained first
        // so no replay still runs on the graph's memory.
        unsafe {
            let _ = sys::cuStreamSynchronize(self.device.main_stream());
            sys::cuGraphExecDestroy(self.exec);
            sys::cuGraphDestroy(self.graph);
        }
    }
}
