//! A tensor's data on one backend, and the cell that views of it share.

use crate::{CpuStorage, CudaStorage, DType, Device};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

#[derive(Debug)]
pub enum Storage {
    Cpu(CpuStorage),
    Cuda(CudaStorage),
}

impl Storage {
    pub fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => s.dtype(),
            Storage::Cuda(s) => s.dtype(),
        }
    }

    pub fn device(&self) -> Device {
        match self {
            Storage::Cpu(_) => Device::Cpu,
            Storage::Cuda(s) => s.device(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Storage::Cpu(s) => s.len(),
            Storage::Cuda(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<CpuStorage> for Storage {
    fn from(s: CpuStorage) -> Storage {
        Storage::Cpu(s)
    }
}

impl From<CudaStorage> for Storage {
    fn from(s: CudaStorage) -> Storage {
        Storage::Cuda(s)
    }
}

/// Storage shared by every view of it, with a version that each in-place write bumps, so
/// backward can tell that a tensor it saved has changed since.
#[derive(Debug)]
pub struct StorageCell {
    data: RwLock<Storage>,
    version: AtomicU64,
    /// The storage's device, readable without the lock (0 = CPU, n + 1 = cuda:n); changes only
    /// when `Tensor::relocate_` moves the data.
    device: AtomicUsize,
}

fn encode_device(d: Device) -> usize {
    match d {
        Device::Cpu => 0,
        Device::Cuda(n) => n + 1,
    }
}

impl StorageCell {
    pub fn new(storage: Storage) -> Self {
        let device = AtomicUsize::new(encode_device(storage.device()));
        StorageCell {
            data: RwLock::new(storage),
            version: AtomicU64::new(0),
            device,
        }
    }

    /// A lock poisoned by a panic elsewhere still holds valid data; the panic itself is the bug.
    pub fn read(&self) -> RwLockReadGuard<'_, Storage> {
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Write access for an in-place update; bumps the version.
    pub fn write(&self) -> RwLockWriteGuard<'_, Storage> {
        self.version.fetch_add(1, Ordering::Relaxed);
        self.data.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn device(&self) -> Device {
        match self.device.load(Ordering::Relaxed) {
            0 => Device::Cpu,
            n => Device::Cuda(n - 1),
        }
    }

    pub fn set_device(&self, d: Device) {
        self.device.store(encode_device(d), Ordering::Relaxed)
    }

    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }
}
