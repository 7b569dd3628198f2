//! Where a tensor lives, and what the layers above may ask of a device: wait for it, read its
//! memory figures, set its precision knobs, capture work into a graph. This is the one door
//! from the engine's models, the bindings and the REPL to the accelerators; they never name
//! `backend::cuda` themselves. The CPU answers each question plainly (nothing to wait for, no
//! device memory) or, where it has no such thing (a graph), with an error naming the op.

use crate::{cuda, Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl Device {
    pub fn parse(name: &str) -> Option<Device> {
        let name = name.trim().to_ascii_lowercase();
        match name.as_str() {
            "cpu" => Some(Device::Cpu),
            "cuda" | "gpu" => Some(Device::Cuda(0)),
            _ => name
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda),
        }
    }

    /// The number of usable CUDA devices, or why there are none (probed once per process,
    /// before any CUDA library is loaded).
    pub fn cuda_count() -> std::result::Result<usize, String> {
        cuda::availability()
    }

    /// Whether at least one CUDA device can be used.
    pub fn cuda_is_available() -> bool {
        cuda::is_available()
    }

    /// For tests: CUDA device 0, or `None` after printing that `test` skipped. Under
    /// `RB_REQUIRE_CUDA=1` a missing device fails the test instead.
    pub fn cuda_for_test(test: &str) -> Option<Device> {
        cuda::device_for_test(test)
    }

    /// Waits until the device has finished the work queued so far; nothing to wait for on the
    /// CPU.
    pub fn synchronize(self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(i) => cuda::device(i)?.synchronize(),
        }
    }

    /// The device's name as its driver gives it ("cpu" for the host).
    pub fn name(self) -> Result<String> {
        match self {
            Device::Cpu => Ok("cpu".into()),
            Device::Cuda(i) => Ok(cuda::device(i)?.name().to_string()),
        }
    }

    /// Free and total bytes of device memory; `None` on the CPU, whose memory is the host's.
    pub fn memory_info(self) -> Result<Option<(usize, usize)>> {
        match self {
            Device::Cpu => Ok(None),
            Device::Cuda(i) => cuda::device(i)?.memory_info().map(Some),
        }
    }

    /// The most bytes the device has held in tensors and caches at once (0 on the CPU).
    pub fn peak_memory(self) -> Result<u64> {
        match self {
            Device::Cpu => Ok(0),
            Device::Cuda(i) => cuda::device(i)?.peak_memory(),
        }
    }

    /// Restarts `peak_memory` from what is held now.
    pub fn reset_peak_memory(self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(i) => cuda::device(i)?.reset_peak_memory(),
        }
    }

    /// Whether F32 matrix products may run on TF32 tensor cores (never on the CPU).
    pub fn tf32_allowed(self) -> Result<bool> {
        match self {
            Device::Cpu => Ok(false),
            Device::Cuda(i) => Ok(cuda::device(i)?.allow_tf32()),
        }
    }

    /// Lets F32 matrix products use TF32 (about 1e-3 relative error); the CPU ignores it.
    pub fn set_tf32_allowed(self, on: bool) -> Result<()> {
        if let Device::Cuda(i) = self {
            cuda::device(i)?.set_allow_tf32(on);
        }
        Ok(())
    }

    /// Hands the allocator's cached blocks and destroyed graphs' memory back to the driver
    /// (PyTorch's `empty_cache`), after the queued work.
    pub fn release_cached_memory(self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(i) => cuda::device(i)?.release_cached_blocks(),
        }
    }

    /// Hands the memory of destroyed graphs back to the driver.
    pub fn trim_graph_memory(self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(i) => cuda::device(i)?.trim_graph_memory(),
        }
    }

    /// Starts (`true`) or stops the profiler's capture range, so `ncu --profile-from-start
    /// off` records only the kernels in between; nothing on the CPU.
    pub fn profiler_capture(self, on: bool) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(i) => cuda::device(i)?.profiler_capture(on),
        }
    }

    /// Records what `work` queues on the device into a graph, without running it; replay it
    /// with `DeviceGraph::replay`. Work that reads the host or waits on the device refuses the
    /// capture with an error; so does the CPU, which has no graphs.
    pub fn capture(self, work: impl FnOnce() -> Result<()>) -> Result<DeviceGraph> {
        match self {
            Device::Cpu => Err(Error::UnsupportedDevice {
                op: "graph capture",
                device: self,
            }),
            Device::Cuda(i) => Ok(DeviceGraph(cuda::graph::CudaGraph::capture(
                &cuda::device(i)?,
                work,
            )?)),
        }
    }
}

/// Work captured once on a device by `Device::capture`, replayed with one launch.
pub struct DeviceGraph(cuda::graph::CudaGraph);

impl DeviceGraph {
    /// Queues the captured work again, in order with everything else on the device.
    pub fn replay(&self) -> Result<()> {
        self.0.replay()
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}
