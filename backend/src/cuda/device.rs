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
    modules: Mutex<HashMap<&'static str, sys::CUmodule>>,
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
                modules: Mutex::new(HashMap::new()),
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

    /// Lets kernel `f` (loaded on this device) take as much dynamic shared memory as the
    /// device allows a block beside the kernel's own static shared memory, and returns that
    /// many bytes. The driver is asked once per kernel; launches on a hot path call this freely.
    pub(crate) fn allow_all_shared(&self, f: sys::CUfunction) -> Result<usize> {
        let mut opted = self
            .shared_opted_in
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(&bytes) = opted.get(&(f as usize)) {
            return Ok(bytes);
        }
        self.bind()?;
        use sys::CUfunction_attribute::{
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX_DYNAMIC,
            CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES as STATIC,
        };
        // SAFETY: `f` is loaded in this device's context, which `bind` made current.
        let static_bytes = unsafe { result::function::get_function_attribute(f, STATIC) }
            .map_err(|e| Error::Cuda(format!("cuFuncGetAttribute(static shared): {e:?}")))?;
        let bytes = self
            .shared_optin
            .saturating_sub(static_bytes.max(0) as usize);
        // SAFETY: as above.
        unsafe { result::function::set_function_attribute(f, MAX_DYNAMIC, bytes as i32) }
            .map_err(|e| Error::Cuda(format!("cuFuncSetAttribute(shared {bytes}): {e:?}")))?;
        opted.insert(f as usize, bytes);
        Ok(bytes)
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

    /// The lane of the capture this thread records on this device, if any.
    fn capturing_here(&self) -> Option<(sys::CUstream, blas_sys::cublasHandle_t)> {
        CAPTURE.with(|c| {
            c.borrow()
                .as_ref()
                .filter(|t| t.ordinal == self.ordinal)
                .map(|t| t.lane)
        })
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

    /// `bytes` of device memory: a cached block of its size class, else one from the
    /// stream-ordered pool. Out of memory is reported with the request and what the device
    /// has free, after the cache and the pool have returned their blocks.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<sys::CUdeviceptr> {
        if bytes == 0 {
            return Ok(0);
        }
        let size = size_class(bytes);
        let capturing = self.capturing_here().is_some();
        // A block made during a capture must be the graph's own, so captures skip the cache.
        if !capturing {
            if let Some(p) = self.block_cache().take(size) {
                return Ok(p);
            }
        }
        self.bind()?;
        // SAFETY: pool and stream belong to this device's context, which is current.
        let first = unsafe { result::mem_pool::alloc_async(self.pool, size, self.stream()) };
        let ptr = match first {
            Ok(p) => {
                if capturing {
                    CAPTURE.with(|c| c.borrow_mut().as_mut().map(|t| t.made.insert(p)));
                    self.graph_blocks().insert(p);
                    // An address a given-up capture had is this graph's now.
                    self.dead_blocks().remove(&p);
                }
                p
            }
            Err(_) if capturing => {
                return Err(Error::Cuda(format!(
                    "allocating {bytes} bytes inside a CUDA graph capture failed (out of memory?)"
                )))
            }
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                let cached = self.block_cache().drain();
                // SAFETY: as above; the cached blocks are nobody's, and trimming only releases
                // blocks nobody holds.
                let retry = unsafe {
                    for p in cached {
                        let _ = result::free_async(p, self.stream);
                    }
                    let _ = result::stream::synchronize(self.stream);
                    let _ = result::mem_pool::trim_to(self.pool, 0);
                    result::mem_pool::alloc_async(self.pool, size, self.stream)
                };
                retry.map_err(|_| {
                    let free = result::mem_get_info().map(|(f, _)| f).unwrap_or(0);
                    crate::memory::out_of_memory(
                        crate::error::ALLOC_OP,
                        &[],
                        None,
                        Device::Cuda(self.ordinal),
                        bytes,
                        free,
                    )
                })?
            }
            Err(e) => {
                return Err(Error::Cuda(format!(
                    "cuMemAllocFromPoolAsync({bytes} bytes): {e:?}"
                )))
            }
        };
        self.block_cache().handed_out(size);
        Ok(ptr)
    }

    fn graph_blocks(&self) -> std::sync::MutexGuard<'_, HashSet<sys::CUdeviceptr>> {
        self.graph_blocks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dead_blocks(&self) -> std::sync::MutexGuard<'_, HashSet<sys::CUdeviceptr>> {
        self.dead_blocks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn block_cache(&self) -> std::sync::MutexGuard<'_, BlockCache> {
        self.blocks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns a block of `bytes` (as it was asked for) for reuse: to the cache, or to the
    /// pool ordered after the work already queued on the stream.
    pub(crate) fn free(&self, ptr: sys::CUdeviceptr, bytes: usize) {
        if ptr == 0 {
            return;
        }
        let size = size_class(bytes);
        if self.dead_blocks().remove(&ptr) {
            self.block_cache().returned(size);
            return;
        }
        let graph_block = self.graph_blocks().remove(&ptr);
        if self.capturing_here().is_some() {
            let deferred = CAPTURE.with(|c| {
                let mut c = c.borrow_mut();
                let t = c.as_mut()?;
                if t.made.remove(&ptr) {
                    return None;
                }
                t.deferred_frees.push((ptr, bytes));
                Some(())
            });
            if deferred.is_some() {
                return;
            }
            // Made in this capture: the graph frees it at each replay.
            self.block_cache().returned(size);
        } else if !graph_block && self.cache_blocks && self.block_cache().give_back(ptr, size) {
            return;
        } else if graph_block || !self.cache_blocks {
            self.block_cache().returned(size);
        }
        if self.bind().is_err() {
            return;
        }
        // SAFETY: `ptr` came from `alloc` on this stream and is freed once (by its owner's Drop).
        if let Err(e) = unsafe { result::free_async(ptr, self.stream()) } {
            crate::messages::warn(&format!(
                "cuda:{}: cuMemFreeAsync failed: {e:?}",
                self.ordinal
            ));
        }
    }

    /// Whether this thread is recording a CUDA graph capture on this device: its launches are
    /// recorded, not run, and host reads and waits are refused.
    pub fn capturing(&self) -> bool {
        self.capturing_here().is_some()
    }

    /// Returns the freed blocks kept for reuse, and destroyed graphs' memory, to the driver,
    /// after the work queued so far (a wait): the memory a CUDA graph's own allocations are
    /// about to take, where a warm-up step left it cached (PyTorch's `empty_cache`).
    pub fn release_cached_blocks(&self) -> Result<()> {
        self.refuse_in_capture("releasing cached memory")?;
        self.bind()?;
        let cached = self.block_cache().drain();
        // SAFETY: the cached blocks are nobody's; trimming only releases blocks nobody holds,
        // after the stream has finished with the frees.
        unsafe {
            for p in cached {
                result::free_async(p, self.stream).map_err(driver_err("cuMemFreeAsync"))?;
            }
            result::stream::synchronize(self.stream).map_err(driver_err("kernel execution"))?;
            result::mem_pool::trim_to(self.pool, 0).map_err(driver_err("cuMemPoolTrimTo"))?;
        }
        self.trim_graph_memory()
    }

    /// Marks `blocks`, made by a capture that was given up, as having no memory behind them.
    pub(crate) fn forget_graph_blocks(&self, blocks: &HashSet<sys::CUdeviceptr>) {
        if blocks.is_empty() {
            return;
        }
        let mut graph = self.graph_blocks();
        let mut dead = self.dead_blocks();
        for p in blocks {
            graph.remove(p);
            dead.insert(*p);
        }
    }

    /// Returns the memory of destroyed CUDA graphs to the driver: a graph's allocations stay
    /// reserved for the next graph otherwise, beside what the allocator holds.
    pub fn trim_graph_memory(&self) -> Result<()> {
        self.bind()?;
        let dev = result::device::get(self.ordinal as i32).map_err(driver_err("cuDeviceGet"))?;
        // SAFETY: a plain driver call on the bound context's device.
        unsafe { sys::cuDeviceGraphMemTrim(dev) }
            .result()
            .map_err(driver_err("cuDeviceGraphMemTrim"))
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

    /// The function `kernel` from `file`, compiling and loading the file on first use.
    pub(crate) fn function(&self, file: &KernelFile, kernel: &str) -> Result<sys::CUfunction> {
        let key = format!("{}:{kernel}", file.name);
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(*f);
        }
        self.bind()?;
        let module = {
            let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
            match modules.get(file.name) {
                Some(m) => *m,
                None => {
                    let image = compile::compiled(file, self.capability)?;
                    // SAFETY: `image` is a CUBIN or NUL-terminated PTX made for this device.
                    let m = unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
                        .map_err(|e| {
                        Error::Cuda(format!("loading kernels/{}: {e:?}", file.name))
                    })?;
                    modules.insert(file.name, m);
                    m
                }
            }
        };
        let cname =
            CString::new(kernel).map_err(|_| Error::Cuda("kernel name has a NUL".into()))?;
        // SAFETY: `module` is loaded in this context.
        let f = unsafe { result::module::get_function(module, cname) }.map_err(|e| {
            Error::Cuda(format!(
                "kernels/{} has no kernel `{kernel}`: {e:?}",
                file.name
            ))
        })?;
        self.functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, f);
        Ok(f)
    }

    /// Launches `f` on this device's stream. `params` point at the kernel's arguments, each of
    /// the exact type the kernel declares.
    ///
    /// # Safety
    /// The arguments must match the kernel's signature and every pointer must be valid for
    /// what the kernel reads and writes.
    pub(crate) unsafe fn launch(
        &self,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: u32,
        shared_bytes: u32,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.bind()?;
        result::launch_kernel(f, grid, (block, 1, 1), shared_bytes, self.stream(), params)
            .map_err(driver_err("cuLaunchKernel"))
    }

    /// Launches `f` with the attributes of `how` (a plain launch where it asks for none, or on
    /// a device before sm_90, which has neither attribute).
    /// - `dependent`: `f` may start before the kernel queued ahead of it has finished
    ///   (programmatic dependent launch). It must call `rb_grid_wait()` (common.cuh) before it
    ///   reads anything an earlier kernel wrote and before it writes anything: only the work
    ///   ahead of that call (loads of weights no kernel writes) overlaps the kernel before.
    ///   Graph captures keep the dependency as such.
    /// - `cluster`: blocks run in thread-block clusters of that many (grid.0 a multiple of it),
    ///   co-scheduled so they can reach each other's shared memory.
    ///
    /// # Safety
    /// As for `launch`, and `f` must wait as described.
    pub(crate) unsafe fn launch_with(
        &self,
        how: Launch,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: u32,
        shared_bytes: u32,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        let mut attrs = self.launch_attributes(how);
        if attrs.is_empty() {
            return self.launch(f, grid, block, shared_bytes, params);
        }
        self.bind()?;
        let config = self.launch_config(grid, block, shared_bytes, &mut attrs);
        sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut())
            .result()
            .map_err(driver_err("cuLaunchKernelEx"))
    }

    /// A launch on this device's stream with `attrs`, which must outlive the config's use.
    fn launch_config(
        &self,
        grid: (u32, u32, u32),
        block: u32,
        shared_bytes: u32,
        attrs: &mut [sys::CUlaunchAttribute],
    ) -> sys::CUlaunchConfig {
        sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: shared_bytes,
            hStream: self.stream(),
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len() as u32,
        }
    }

    /// The launch attributes `how` asks for that this device has.
    fn launch_attributes(&self, how: Launch) -> Vec<sys::CUlaunchAttribute> {
        let mut attrs = Vec::with_capacity(2);
        if self.capability.0 < 9 {
            return attrs;
        }
        if how.dependent {
            // SAFETY: a zeroed attribute is a valid value of the union; the id selects its field.
            let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attr.id =
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attr.value.programmaticStreamSerializationAllowed = 1;
            attrs.push(attr);
        }
        if how.cluster > 1 {
            // SAFETY: as above.
            let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attr.value.clusterDim.x = how.cluster;
            attr.value.clusterDim.y = 1;
            attr.value.clusterDim.z = 1;
            attrs.push(attr);
        }
        attrs
    }

    /// Clusters of `how.cluster` blocks of `f` (`block` threads, `shared` bytes each) that are
    /// resident at once on the whole device; 0 where the device has no clusters.
    pub(crate) fn resident_clusters(
        &self,
        how: Launch,
        f: sys::CUfunction,
        block: u32,
        shared: u32,
    ) -> Result<u32> {
        if self.capability.0 < 9 || how.cluster < 2 {
            return Ok(0);
        }
        self.bind()?;
        let mut attrs = self.launch_attributes(how);
        let grid = (how.cluster * self.sm_count(), 1, 1);
        let config = self.launch_config(grid, block, shared, &mut attrs);
        let mut n = 0i32;
        // SAFETY: `config` and its attributes live across the call; `f` is this context's.
        unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, f, &config) }
            .result()
            .map_err(driver_err("cuOccupancyMaxActiveClusters"))?;
        Ok(n.max(0) as u32)
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

    /// The most bytes handed out at once (by size class, cached blocks not counted) since the
    /// device started, or since the last `reset_peak_memory`.
    pub fn peak_memory(&self) -> Result<u64> {
        Ok(self.block_cache().peak())
    }

    /// Restarts `peak_memory` from what is in use now.
    pub fn reset_peak_memory(&self) -> Result<()> {
        self.block_cache().reset_peak();
        Ok(())
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

    /// Free and total device memory in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        result::mem_get_info().map_err(driver_err("cuMemGetInfo"))
    }
}
