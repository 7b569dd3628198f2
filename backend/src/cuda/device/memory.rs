//! A device's memory: the stream-ordered pool behind a cache of freed blocks by size class,
//! the blocks a CUDA graph owns, and the figures (`peak_memory`, `memory_info`).

use super::*;

impl CudaDevice {
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

    pub(super) fn graph_blocks(&self) -> std::sync::MutexGuard<'_, HashSet<sys::CUdeviceptr>> {
        self.graph_blocks.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn dead_blocks(&self) -> std::sync::MutexGuard<'_, HashSet<sys::CUdeviceptr>> {
        self.dead_blocks.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn block_cache(&self) -> std::sync::MutexGuard<'_, BlockCache> {
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

    /// Free and total device memory in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        result::mem_get_info().map_err(driver_err("cuMemGetInfo"))
    }
}
