//! Device memory holding one dtype's elements. Freed back to the device's pool on drop, ordered
//! after the kernels already queued, so a buffer can be dropped while work on it is in flight.

use super::device::CudaDevice;
use crate::CpuStorage;
use crate::{DType, Device, Error, Result};
use cudarc::driver::sys::CUdeviceptr;
use std::sync::Arc;

pub struct CudaStorage {
    ptr: CUdeviceptr,
    len: usize,
    dtype: DType,
    device: Arc<CudaDevice>,
}

impl CudaStorage {
    /// Uninitialized room for `len` elements; every caller writes all of them before reading.
    pub fn alloc(device: &Arc<CudaDevice>, len: usize, dtype: DType) -> Result<CudaStorage> {
        let bytes = len
            .checked_mul(dtype.size_in_bytes())
            .ok_or_else(|| Error::invalid("cuda alloc", format!("{len} elements overflow")))?;
        Ok(CudaStorage {
            ptr: device.alloc(bytes)?,
            len,
            dtype,
            device: device.clone(),
        })
    }

    /// Copies a host storage to the device.
    pub fn from_cpu(device: &Arc<CudaDevice>, s: &CpuStorage) -> Result<CudaStorage> {
        let out = CudaStorage::alloc(device, s.len(), s.dtype())?;
        device.upload(out.ptr, s.as_bytes())?;
        Ok(out)
    }

    /// Copies to the host, after all queued work (which also reports a bad index met by an
    /// earlier kernel).
    pub fn to_cpu(&self) -> Result<CpuStorage> {
        let mut bytes = vec![0u8; self.bytes()];
        self.device.download(self.ptr, &mut bytes)?;
        CpuStorage::from_le_bytes(&bytes, self.dtype)
            .ok_or_else(|| Error::Cuda(format!("device data is not valid {:?}", self.dtype)))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> Device {
        Device::Cuda(self.device.ordinal())
    }

    pub fn cuda_device(&self) -> &Arc<CudaDevice> {
        &self.device
    }

    pub fn bytes(&self) -> usize {
        self.len * self.dtype.size_in_bytes()
    }

    /// The device address of element `offset`.
    pub fn ptr_at(&self, offset: usize) -> u64 {
        self.ptr + (offset * self.dtype.size_in_bytes()) as u64
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for CudaStorage {
    fn drop(&mut self) {
        self.device
            .free(self.ptr, self.len * self.dtype.size_in_bytes());
    }
}

impl std::fmt::Debug for CudaStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaStorage({} x {:?} on cuda:{})",
            self.len,
            self.dtype,
            self.device.ordinal()
        )
    }
}
