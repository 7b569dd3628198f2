//! CPU storage: one `Vec` per dtype. Kernels are generic over `WithDType` and dispatched with
//! `cpu_dispatch!`, so each kernel is written once for all dtypes.

use crate::{DType, WithDType};
use half::{bf16, f16};

#[derive(Clone, Debug)]
pub enum CpuStorage {
    Bool(Vec<bool>),
    U8(Vec<u8>),
    U32(Vec<u32>),
    I64(Vec<i64>),
    BF16(Vec<bf16>),
    F16(Vec<f16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// Runs `$body` with `$v` bound to the storage's `Vec` (or slice), whatever its dtype.
#[macro_export]
macro_rules! cpu_dispatch {
    ($s:expr, $v:ident => $body:expr) => {
        match $s {
            $crate::cpu::CpuStorage::Bool($v) => $body,
            $crate::cpu::CpuStorage::U8($v) => $body,
            $crate::cpu::CpuStorage::U32($v) => $body,
            $crate::cpu::CpuStorage::I64($v) => $body,
            $crate::cpu::CpuStorage::BF16($v) => $body,
            $crate::cpu::CpuStorage::F16($v) => $body,
            $crate::cpu::CpuStorage::F32($v) => $body,
            $crate::cpu::CpuStorage::F64($v) => $body,
        }
    };
}

/// A `Vec<T>` of any supported element type turns into a storage.
pub trait IntoCpuStorage: WithDType {
    fn into_storage(v: Vec<Self>) -> CpuStorage;
    fn slice(s: &CpuStorage) -> Option<&[Self]>;
    fn slice_mut(s: &mut CpuStorage) -> Option<&mut [Self]>;
}

macro_rules! into_storage {
    ($t:ty, $variant:ident) => {
        impl IntoCpuStorage for $t {
            fn into_storage(v: Vec<Self>) -> CpuStorage {
                CpuStorage::$variant(v)
            }
            fn slice(s: &CpuStorage) -> Option<&[Self]> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(s: &mut CpuStorage) -> Option<&mut [Self]> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
into_storage!(bool, Bool);
into_storage!(u8, U8);
into_storage!(u32, U32);
into_storage!(i64, I64);
into_storage!(bf16, BF16);
into_storage!(f16, F16);
into_storage!(f32, F32);
into_storage!(f64, F64);

impl CpuStorage {
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::Bool(_) => DType::Bool,
            CpuStorage::U8(_) => DType::U8,
            CpuStorage::U32(_) => DType::U32,
            CpuStorage::I64(_) => DType::I64,
            CpuStorage::BF16(_) => DType::BF16,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F64(_) => DType::F64,
        }
    }

    pub fn len(&self) -> usize {
        cpu_dispatch!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A storage of `n` copies of `value`, converted to `dtype`.
    pub fn full(value: f64, n: usize, dtype: DType) -> CpuStorage {
        fn fill<T: IntoCpuStorage>(value: f64, n: usize) -> CpuStorage {
            T::into_storage(vec![T::from_f64(value); n])
        }
        match dtype {
            DType::Bool => fill::<bool>(value, n),
            DType::U8 => fill::<u8>(value, n),
            DType::U32 => fill::<u32>(value, n),
            DType::I64 => fill::<i64>(value, n),
            DType::BF16 => fill::<bf16>(value, n),
            DType::F16 => fill::<f16>(value, n),
            DType::F32 => fill::<f32>(value, n),
            DType::F64 => fill::<f64>(value, n),
        }
    }

    /// Builds a storage of `dtype` from f64 values (used by creation ops and tests).
    pub fn from_f64s(values: &[f64], dtype: DType) -> CpuStorage {
        fn conv<T: IntoCpuStorage>(values: &[f64]) -> CpuStorage {
            T::into_storage(values.iter().map(|&x| T::from_f64(x)).collect())
        }
        match dtype {
            DType::Bool => conv::<bool>(values),
            DType::U8 => conv::<u8>(values),
            DType::U32 => conv::<u32>(values),
            DType::I64 => conv::<i64>(values),
            DType::BF16 => conv::<bf16>(values),
            DType::F16 => conv::<f16>(values),
            DType::F32 => conv::<f32>(values),
            DType::F64 => conv::<f64>(values),
        }
    }

    /// The raw little-endian bytes, as safetensors stores them.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            CpuStorage::Bool(v) => v.iter().map(|&b| b as u8).collect(),
            CpuStorage::U8(v) => v.clone(),
            CpuStorage::U32(v) => bytemuck::cast_slice(v).to_vec(),
            CpuStorage::I64(v) => bytemuck::cast_slice(v).to_vec(),
            CpuStorage::BF16(v) => bytemuck::cast_slice(v).to_vec(),
            CpuStorage::F16(v) => bytemuck::cast_slice(v).to_vec(),
            CpuStorage::F32(v) => bytemuck::cast_slice(v).to_vec(),
            CpuStorage::F64(v) => bytemuck::cast_slice(v).to_vec(),
        }
    }

    /// The elements as bytes, without a copy (for uploads to a device).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            // SAFETY: a bool is one byte holding 0 or 1, so every bool is a valid u8.
            CpuStorage::Bool(v) => unsafe {
                std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len())
            },
            CpuStorage::U8(v) => v,
            CpuStorage::U32(v) => bytemuck::cast_slice(v),
            CpuStorage::I64(v) => bytemuck::cast_slice(v),
            CpuStorage::BF16(v) => bytemuck::cast_slice(v),
            CpuStorage::F16(v) => bytemuck::cast_slice(v),
            CpuStorage::F32(v) => bytemuck::cast_slice(v),
            CpuStorage::F64(v) => bytemuck::cast_slice(v),
        }
    }

    /// Reads little-endian bytes of `dtype`; `bytes.len()` must be a multiple of the element size.
    pub fn from_le_bytes(bytes: &[u8], dtype: DType) -> Option<CpuStorage> {
        if !bytes.len().is_multiple_of(dtype.size_in_bytes()) {
            return None;
        }
        fn pod<T: bytemuck::Pod>(bytes: &[u8]) -> Vec<T> {
            // Copy through chunks: `bytes` need not be aligned for T.
            bytes
                .chunks_exact(std::mem::size_of::<T>())
                .map(bytemuck::pod_read_unaligned)
                .collect()
        }
        Some(match dtype {
            DType::Bool => CpuStorage::Bool(bytes.iter().map(|&b| b != 0).collect()),
            DType::U8 => CpuStorage::U8(bytes.to_vec()),
            DType::U32 => CpuStorage::U32(pod(bytes)),
            DType::I64 => CpuStorage::I64(pod(bytes)),
            DType::BF16 => CpuStorage::BF16(pod(bytes)),
            DType::F16 => CpuStorage::F16(pod(bytes)),
            DType::F32 => CpuStorage::F32(pod(bytes)),
            DType::F64 => CpuStorage::F64(pod(bytes)),
        })
    }
}

/// Like `cpu_dispatch!` for two storages that the caller has already brought to one dtype.
#[macro_export]
macro_rules! cpu_dispatch2 {
    ($a:expr, $b:expr, ($x:ident, $y:ident) => $body:expr) => {{
        use $crate::cpu::CpuStorage as S;
        match ($a, $b) {
            (S::Bool($x), S::Bool($y)) => $body,
            (S::U8($x), S::U8($y)) => $body,
            (S::U32($x), S::U32($y)) => $body,
            (S::I64($x), S::I64($y)) => $body,
            (S::BF16($x), S::BF16($y)) => $body,
            (S::F16($x), S::F16($y)) => $body,
            (S::F32($x), S::F32($y)) => $body,
            (S::F64($x), S::F64($y)) => $body,
            (x, y) => unreachable!(
                "operands of {:?} and {:?} reached a kernel unpromoted",
                x.dtype(),
                y.dtype()
            ),
        }
    }};
}
