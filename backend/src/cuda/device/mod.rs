//! One CUDA device: its context, its one stream, its memory pool, its cuBLAS handle and the
//! kernels loaded on it. Devices start lazily on first use, so `brain` starts fast and a machine
//! without CUDA never touches the driver.

use super::block_cache::{size_class, BlockCache};
use super::compile::{self, KernelFile};
use super::probe::probe;
use crate::{Device, Error, Result};
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{result, sys};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

mod capture;
mod launch;
mod memory;

/// cuBLAS picks faster kernels on Hopper with a workspace of this size.
const BLAS_WORKSPACE: usize = 32 << 20;
/// Dynamic shared memory a launch may use without opting in.
pub const DEFAULT_SHARED: usize = 48 << 10;
/// Zeroed 32-bit counters every device keeps for kernels whose last block to finish does the
/// final step (the decode attention's merge): such a kernel leaves its counters zero again.
pub(crate) const COUNTERS: usize = 1 << 16;

/// How `CudaDevice::launch_with` launches a kernel beyond grid, block and shared memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Launch {
    /// Programmatic dependent launch: the kernel may start while the one before it runs.
    pub dependent: bool,
    /// Blocks a thread-block cluster holds (0 or 1: no clusters).
    pub cluster: u32,
}

pub struct CudaDevice {
    ordinal: usize,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    pool: sys::CUmemoryPool,
    blas: blas_sys::cublasHandle_t,
    name: String,
    capability: (i32, i32),
    sm_count: u32,
    /// The most shared memory a block may opt into (static and dynamic together).
    shared_optin: usize,
    /// A word that kernels set when they meet an out-of-range index; read at each sync, so a
    /// bad index is an error without a host round trip per op. It lives in pinned host memory
    /// mapped into the device, so reading it after a sync costs no copy.
    error_word: sys::CUdeviceptr,
    /// `COUNTERS` zeroed u32 (see the constant).
    counters: sys::CUdeviceptr,
    error_host: *mut u32,
    functions: Mutex<HashMap<String, sys::CUfunction>>,
    /// Kernels already let take all the dynamic shared memory (`allow_all_shared`), by
    /// function, with the bytes they may take.
    shared_opted_in: Mutex<HashMap<usize, usize>>,
    tf32: AtomicBool,
    /// The stream and cuBLAS handle a CUDA graph capture records on (`graph.rs`), made on the
    /// first capture. The lock is held for a whole capture: one at a time per device.
    capture_lane: Mutex<Option<CaptureLane>>,
    /// Freed blocks kept for reuse, and the bytes handed out (`peak_memory`).
    blocks: Mutex<BlockCache>,
    /// Whether freed blocks are kept (`RB_CUDA_BLOCK_CACHE=0` turns it off, to compare).
    cache_blocks: bool,
    /// Blocks allocated inside a capture and not freed in it: addresses of a graph's
    /// allocations, not of the pool. One freed later (a failed capture's leftovers, or a block
    /// dropped by another thread) goes back through `cuMemFreeAsync`, never to the cache,
    /// which would hand it out as ordinary memory.
    graph_blocks: Mutex<HashSet<sys::CUdeviceptr>>,
    /// Blocks of a capture that was given up (`CudaGraph::capture` failed): the graph never
    /// ran, so there is no memory behind them, and their owners' frees only count the bytes.
    dead_blocks: Mutex<HashSet<sys::CUdeviceptr>>,
}

/// A second stream, with its own cuBLAS handle, for captures: the thread that captures queues
/// its work there, so work that other threads queue meanwhile on the device's stream runs as
/// usual instead of landing in the graph.
pub(crate) struct CaptureLane {
    pub stream: sys::CUstream,
    pub blas: blas_sys::cublasHandle_t,
}

/// The capture the current thread is recording. Blocks it allocates become the graph's own
/// (fixed addresses at every replay) and may be freed in it. A block from before the capture
/// that is dropped during it cannot be freed by the graph: its free waits until the capture
/// ends.
struct ThreadCapture {
    ordinal: usize,
    lane: (sys::CUstream, blas_sys::cublasHandle_t),
    made: HashSet<sys::CUdeviceptr>,
    /// (block, bytes asked for) of each block whose free waits for the capture's end.
    deferred_frees: Vec<(sys::CUdeviceptr, usize)>,
}

// SAFETY: the raw handles are owned by this struct for the process lifetime; the driver API is
// thread-safe once a thread binds the context (`bind`), and cuBLAS calls are serialized on the
// one stream by the engine's lock-free, single-stream design (a handle is used from one thread
// at a time because every op binds and launches under the storage locks of its tensors).
unsafe impl Send for CudaDevice {}
unsafe impl Sync for CudaDevice {}

thread_local! {
    static CURRENT_CTX: Cell<usize> = const { Cell::new(0) };
    static CAPTURE: RefCell<Option<ThreadCapture>> = const { RefCell::new(None) };
}

fn driver_err(what: &str) -> impl Fn(result::DriverError) -> Error + '_ {
    move |e| Error::Cuda(format!("{what}: {e:?}"))
}

/// Makes `later` wait for what is queued on `earlier` so far (two streams of the bound
/// context): a capture lane after the device's stream, or a collective after the kernels that
/// wrote its input.
pub(crate) fn order_after(earlier: sys::CUstream, later: sys::CUstream) -> Result<()> {
    let mut event: sys::CUevent = std::ptr::null_mut();
    // SAFETY: a fresh event recorded on one stream and waited on by the other, both of the
    // bound context; destroying it after the wait is queued is allowed.
    unsafe {
        sys::cuEventCreate(
            &mut event,
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
        )
        .result()
        .map_err(driver_err("cuEventCreate"))?;
        let r = sys::cuEventRecord(event, earlier)
            .result()
            .map_err(driver_err("cuEventRecord"))
            .and_then(|_| {
                sys::cuStreamWaitEvent(later, event, 0)
                    .result()
                    .map_err(driver_err("cuStreamWaitEvent"))
            });
        sys::cuEventDestroy_v2(event);
        r
    }
}

static AVAILABLE: OnceLock<std::result::Result<usize, String>> = OnceLock::new();
static DEVICES: Mutex<Vec<Option<Arc<CudaDevice>>>> = Mutex::new(Vec::new());

/// The number of CUDA devices, or why there are none. Probes once per process.
pub fn availability() -> std::result::Result<usize, String> {
    AVAILABLE
        .get_or_init(|| {
            probe()?;
            result::init().map_err(|e| format!("cuInit failed: {e:?}"))?;
            let n = result::device::get_count().map_err(|e| format!("{e:?}"))?;
            if n <= 0 {
                return Err("the driver reports no CUDA device".into());
            }
            Ok(n as usize)
        })
        .clone()
}

/// Whether at least one CUDA device can be used.
pub fn is_available() -> bool {
    availability().is_ok()
}

/// The device with this ordinal, started on first use.
pub fn device(ordinal: usize) -> Result<Arc<CudaDevice>> {
    let count =
        availability().map_err(|why| Error::DeviceUnavailable(Device::Cuda(ordinal), why))?;
    if ordinal >= count {
        return Err(Error::DeviceUnavailable(
            Device::Cuda(ordinal),
            format!("there are {count} CUDA device(s)"),
        ));
    }
    let mut devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    if devices.len() < count {
        devices.resize(count, None);
    }
    if let Some(d) = &devices[ordinal] {
        return Ok(d.clone());
    }
    let d = Arc::new(CudaDevice::start(ordinal)?);
    devices[ordinal] = Some(d.clone());
    Ok(d)
}

impl CudaDevice {
    fn start(ordinal: usize) -> Result<CudaDevice> {
        let dev = result::device::get(ordinal as i32).map_err(driver_err("cuDeviceGet"))?;
        // SAFETY: `dev` is a valid device handle from the driver.
        unsafe {
            let ctx =
                result::primary_ctx::retain(dev).map_err(driver_err("cuDevicePrimaryCtxRetain"))?;
            result::ctx::set_current(ctx).map_err(driver_err("cuCtxSetCurrent"))?;
            CURRENT_CTX.with(|c| c.set(ctx as usize));
            let attr = |a| result::device::get_attribute(dev, a).unwrap_or(0);
            use sys::CUdevice_attribute::*;
            let capability = (
                attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
            );
            let sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).max(1) as u32;
            let shared_optin = (attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN).max(0)
                as usize)
                .max(DEFAULT_SHARED);
            let name = result::device::get_name(dev).unwrap_or_else(|_| "CUDA device".into());
            let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
                .map_err(driver_err("cuStreamCreate"))?;
            // Freed blocks stay in the pool for reuse instead of going back to the driver at
            // each synchronization: the pool's release threshold is "never".
            let pool = result::device::get_default_mem_pool(dev)
                .map_err(driver_err("cuDeviceGetDefaultMemPool"))?;
            let mut keep: u64 = u64::MAX;
            result::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut keep as *mut u64 as *mut c_void,
            )
            .map_err(driver_err("cuMemPoolSetAttribute"))?;
            let blas =
                blas::create_handle().map_err(|e| Error::Cuda(format!("cublasCreate: {e:?}")))?;
            blas::set_stream(blas, stream as _)
                .map_err(|e| Error::Cuda(format!("cublasSetStream: {e:?}")))?;
            let mut device = CudaDevice {
                ordinal,
                ctx,
                stream,
                pool,
                blas,
                name,
                capability,
                sm_count,
                shared_optin,
                error_word: 0,
                counters: 0,
                error_host: std::ptr::null_mut(),
                functions: Mutex::new(HashMap::new()),
                shared_opted_in: Mutex::new(HashMap::new()),
                tf32: AtomicBool::new(false),
                capture_lane: Mutex::new(None),
                blocks: Mutex::new(BlockCache::default()),
                cache_blocks: std::env::var("RB_CUDA_BLOCK_CACHE").as_deref() != Ok("0"),
                graph_blocks: Mutex::new(HashSet::new()),
                dead_blocks: Mutex::new(HashSet::new()),
            };
            let workspace = device.alloc(BLAS_WORKSPACE)?;
            blas_sys::cublasSetWorkspace_v2(blas, workspace as *mut c_void, BLAS_WORKSPACE)
                .result()
                .map_err(|e| Error::Cuda(format!("cublasSetWorkspace: {e:?}")))?;
            device.counters = device.alloc(COUNTERS * 4)?;
            sys::cuMemsetD32Async(device.counters, 0, COUNTERS, stream)
                .result()
                .map_err(driver_err("cuMemsetD32"))?;
            let host = result::malloc_host(4, sys::CU_MEMHOSTALLOC_DEVICEMAP)
                .map_err(driver_err("cuMemHostAlloc"))? as *mut u32;
            host.write_volatile(0);
            let mut mapped: sys::CUdeviceptr = 0;
            sys::cuMemHostGetDevicePointer_v2(&mut mapped, host as *mut c_void, 0)
                .result()
                .map_err(driver_err("cuMemHostGetDevicePointer"))?;
            device.error_host = host;
            device.error_word = mapped;
            crate::messages::info(&format!(
                "cuda:{ordinal}: {} (sm_{}{}, {} SMs)",
                device.name, capability.0, capability.1, sm_count
            ));
            Ok(device)
        }
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn capability(&self) -> (i32, i32) {
        self.capability
    }

    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// The most shared memory, static and dynamic, one block may use once its kernel opts in
    /// (`allow_all_shared`); a launch may take 48 KB without opting in.
    pub fn shared_limit(&self) -> usize {
        self.shared_optin
    }

    /// The stream this thread's work goes to: the capture lane's while it captures, else the
    /// device's.
    pub(crate) fn stream(&self) -> sys::CUstream {
        self.capturing_here().map_or(self.stream, |l| l.0)
    }

    /// The device's own stream, where graphs replay.
    pub(crate) fn main_stream(&self) -> sys::CUstream {
        self.stream
    }

    /// The cuBLAS handle bound to `stream()`.
    pub(crate) fn blas(&self) -> blas_sys::cublasHandle_t {
        self.capturing_here().map_or(self.blas, |l| l.1)
    }

    pub(crate) fn error_word(&self) -> sys::CUdeviceptr {
        self.error_word
    }

    /// The device's zeroed counters (`COUNTERS` of them). Kernels run one at a time on the
    /// device's stream, and each leaves the counters it used zero, so they need no reset.
    pub(crate) fn counters(&self) -> sys::CUdeviceptr {
        self.counters
    }

    /// Whether F32 matmuls may use TF32 tensor cores (off by default, as in PyTorch).
    pub fn allow_tf32(&self) -> bool {
        self.tf32.load(Ordering::Relaxed)
    }

    pub fn set_allow_tf32(&self, on: bool) {
        self.tf32.store(on, Ordering::Relaxed)
    }

    /// Makes this device's context current on the calling thread (a no-op when it already is).
    pub(crate) fn bind(&self) -> Result<()> {
        let ctx = self.ctx as usize;
        if CURRENT_CTX.with(|c| c.get()) != ctx {
            // SAFETY: the context is retained for the life of the process.
            unsafe { result::ctx::set_current(self.ctx) }.map_err(driver_err("cuCtxSetCurrent"))?;
            CURRENT_CTX.with(|c| c.set(ctx));
        }
        Ok(())
    }

    /// Waits for the stream, then reports an out-of-range index any kernel met since the last
    /// sync.
    pub fn synchronize(&self) -> Result<()> {
        self.refuse_in_capture("waiting for the device")?;
        self.bind()?;
        // SAFETY: the stream is valid for the life of the device.
        unsafe { result::stream::synchronize(self.stream) }
            .map_err(driver_err("kernel execution"))?;
        // SAFETY: `error_host` is a live pinned word; the stream is idle, so no kernel writes it.
        let word = unsafe { self.error_host.read_volatile() };
        if word != 0 {
            // SAFETY: as above.
            unsafe { self.error_host.write_volatile(0) };
            return Err(Error::invalid(
                super::launch::flag_op_name(word),
                "an index was out of range on the device (the results of that op are not valid)",
            ));
        }
        Ok(())
    }

    /// Copies host bytes to a device allocation.
    pub(crate) fn upload(&self, dst: sys::CUdeviceptr, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        // A captured copy would replay from a host buffer that is gone by then.
        self.refuse_in_capture("a host-to-device copy")?;
        self.bind()?;
        // SAFETY: `dst` holds at least `bytes.len()` bytes; pageable copies are staged before
        // the call returns, so `bytes` may be dropped right after.
        unsafe { result::memcpy_htod_async(dst, bytes, self.stream) }
            .map_err(driver_err("cuMemcpyHtoD"))
    }

    /// Copies device bytes to the host, after everything queued before it.
    pub(crate) fn download(&self, src: sys::CUdeviceptr, bytes: &mut [u8]) -> Result<()> {
        if bytes.is_empty() {
            return self.synchronize();
        }
        self.refuse_in_capture("a device-to-host copy")?;
        self.bind()?;
        // SAFETY: `src` holds at least `bytes.len()` bytes.
        unsafe { result::memcpy_dtoh_async(bytes, src, self.stream) }
            .map_err(driver_err("cuMemcpyDtoH"))?;
        self.synchronize()
    }

    /// Device-to-device copy on the stream.
    pub(crate) fn copy_device(
        &self,
        dst: sys::CUdeviceptr,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: both ranges are live allocations of at least `bytes`.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream()) }
            .map_err(driver_err("cuMemcpyDtoD"))
    }

    /// Starts (`true`) or stops the profiler's capture range, so `ncu --profile-from-start off`
    /// records only the kernels in between.
    pub fn profiler_capture(&self, on: bool) -> Result<()> {
        self.bind()?;
        // SAFETY: plain driver calls on the bound context, no arguments.
        let r = unsafe {
            if on {
                sys::cuProfilerStart()
            } else {
                sys::cuProfilerStop()
            }
        };
        r.result().map_err(driver_err("cuProfilerStart/Stop"))
    }
}
