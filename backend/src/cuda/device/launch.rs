//! Kernels on a device: one module per kernel from its compiled CUBIN, functions looked up once, and
//! the launch configuration (shared memory opt-in, clusters, dependent launch).

use super::*;

impl CudaDevice {
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

    /// The function `kernel` from `file`, compiled (or read from the kernel cache) and loaded
    /// as a module of its own on first use.
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
        let image = compile::compiled(file, kernel, self.capability)?;
        // SAFETY: `image` is a CUBIN made for this device. The module stays loaded for the
        // device's life, as the function taken from it is cached.
        let module = unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
            .map_err(|e| Error::Cuda(format!("loading {kernel} (kernels/{}): {e:?}", file.name)))?;
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

    /// A launch on this device's stream with `attrs`, which must outlive the config's use.
    pub(super) fn launch_config(
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
    pub(super) fn launch_attributes(&self, how: Launch) -> Vec<sys::CUlaunchAttribute> {
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
}
