//! Storages and the tensors built over them.
//!
//! A pickle names a storage by key, element type and length; the bytes live elsewhere (a zip
//! entry, or the tail of a legacy file). A tensor is a strided view of one storage, which is
//! copied out here into a fresh contiguous engine tensor after checking every index against the
//! storage's length.

use crate::backend::{CpuStorage, Storage};
use crate::{DType, Result, Tensor};

/// A torch storage's element type. Integer types narrower than 64 bits load widened to `I64`,
/// as the engine has no signed integer type besides it; the values are unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ElemType {
    F16,
    BF16,
    F32,
    F64,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
    /// A storage type torch has but the engine cannot hold (complex, quantized, ...).
    Unsupported(&'static str),
}

impl ElemType {
    /// The element type of `torch.<name>`, for the storage classes torch defines.
    pub(super) fn from_storage_name(name: &str) -> Option<ElemType> {
        use ElemType::*;
        Some(match name {
            "HalfStorage" => F16,
            "BFloat16Storage" => BF16,
            "FloatStorage" => F32,
            "DoubleStorage" => F64,
            "LongStorage" => I64,
            "IntStorage" => I32,
            "ShortStorage" => I16,
            "CharStorage" => I8,
            "ByteStorage" | "UntypedStorage" => U8,
            "BoolStorage" => Bool,
            "ComplexFloatStorage" => Unsupported("complex64"),
            "ComplexDoubleStorage" => Unsupported("complex128"),
            "QInt8Storage" | "QUInt8Storage" | "QInt32Storage" | "QUInt4x2Storage"
            | "QUInt2x4Storage" => Unsupported("quantized"),
            _ => return None,
        })
    }

    /// Bytes per element in the file.
    pub(super) fn size(self) -> usize {
        use ElemType::*;
        match self {
            U8 | I8 | Bool => 1,
            F16 | BF16 | I16 => 2,
            F32 | I32 => 4,
            F64 | I64 => 8,
            Unsupported("complex128") => 16,
            Unsupported(_) => 8,
        }
    }

    /// The engine dtype this loads as, or the torch type name when there is none.
    fn engine_dtype(self) -> std::result::Result<DType, &'static str> {
        use ElemType::*;
        Ok(match self {
            F16 => DType::F16,
            BF16 => DType::BF16,
            F32 => DType::F32,
            F64 => DType::F64,
            I64 | I32 | I16 | I8 => DType::I64,
            U8 => DType::U8,
            Bool => DType::Bool,
            Unsupported(name) => return Err(name),
        })
    }
}

/// A pickle's reference to a storage: the root storage's key and type, its declared length in
/// elements, and for legacy views the element range of the root that the view covers.
#[derive(Clone, Debug)]
pub(super) struct StorageRef {
    pub key: String,
    pub elem: ElemType,
    pub numel: usize,
    pub view: Option<(usize, usize)>,
}

/// `_rebuild_tensor_v2`'s arguments: which storage, and the strided view of it.
#[derive(Clone, Debug)]
pub(super) struct TensorSpec {
    pub storage: StorageRef,
    pub offset: usize,
    pub size: Vec<usize>,
    pub stride: Vec<usize>,
}

/// Copies the view `spec` out of its root storage's bytes `root` into a contiguous tensor.
/// Errors are plain messages; the caller adds the file and the tensor's name.
pub(super) fn build_tensor(spec: &TensorSpec, root: &[u8]) -> std::result::Result<Tensor, String> {
    let st = &spec.storage;
    let dtype = st
        .elem
        .engine_dtype()
        .map_err(|t| format!("its element type {t} is not supported by the engine"))?;
    let elem = st.elem.size();
    let root_bytes = st.numel.checked_mul(elem).ok_or("storage size overflows")?;
    if root.len() != root_bytes {
        return Err(format!(
            "storage `{}` holds {} bytes but its {} elements of {:?} need {root_bytes}",
            st.key,
            root.len(),
            st.numel,
            st.elem
        ));
    }
    // A legacy view is a window of the root storage, in elements.
    let (view_start, view_len) = st.view.unwrap_or((0, st.numel));
    if view_start
        .checked_add(view_len)
        .is_none_or(|end| end > st.numel)
    {
        return Err(format!(
            "storage view [{view_start}, +{view_len}) lies outside its {} elements",
            st.numel
        ));
    }
    if spec.size.len() != spec.stride.len() {
        return Err(format!(
            "size {:?} and stride {:?} differ in rank",
            spec.size, spec.stride
        ));
    }
    let numel = spec
        .size
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or("element count overflows")?;
    if numel > 0 {
        // The farthest element the view reaches must lie inside the storage view.
        let last = spec
            .size
            .iter()
            .zip(&spec.stride)
            .try_fold(spec.offset, |acc, (&d, &s)| {
                acc.checked_add((d - 1).checked_mul(s)?)
            })
            .ok_or("view extent overflows")?;
        if last >= view_len {
            return Err(format!(
                "offset {} with size {:?} and stride {:?} reaches element {last} of a storage of {view_len}",
                spec.offset, spec.size, spec.stride
            ));
        }
    }
    let base = &root[view_start * elem..(view_start + view_len) * elem];
    let bytes = gather(base, elem, spec.offset, &spec.size, &spec.stride, numel);
    let storage = to_cpu_storage(&bytes, st.elem, dtype).ok_or("ragged storage data")?;
    Tensor::from_storage(Storage::Cpu(storage), &spec.size).map_err(|e| e.to_string())
}

/// The view's elements in row-major order, `elem` bytes each. Indices were bounds-checked.
fn gather(
    base: &[u8],
    elem: usize,
    offset: usize,
    size: &[usize],
    stride: &[usize],
    numel: usize,
) -> Vec<u8> {
    if is_contiguous(size, stride) {
        return base[offset * elem..(offset + numel) * elem].to_vec();
    }
    let mut out = Vec::with_capacity(numel * elem);
    let mut index = vec![0usize; size.len()];
    for _ in 0..numel {
        let at = offset + index.iter().zip(stride).map(|(i, s)| i * s).sum::<usize>();
        out.extend_from_slice(&base[at * elem..(at + 1) * elem]);
        // Odometer step over the dims, last dim fastest.
        for d in (0..size.len()).rev() {
            index[d] += 1;
            if index[d] < size[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

fn is_contiguous(size: &[usize], stride: &[usize]) -> bool {
    let mut expected = 1;
    for (&d, &s) in size.iter().zip(stride).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected *= d;
    }
    true
}

fn to_cpu_storage(bytes: &[u8], elem: ElemType, dtype: DType) -> Option<CpuStorage> {
    fn widen<const N: usize>(bytes: &[u8], f: fn([u8; N]) -> i64) -> CpuStorage {
        let values = bytes
            .chunks_exact(N)
            .map(|c| f(c.try_into().unwrap_or([0; N])))
            .collect();
        CpuStorage::I64(values)
    }
    Some(match elem {
        ElemType::I32 => widen::<4>(bytes, |b| i32::from_le_bytes(b) as i64),
        ElemType::I16 => widen::<2>(bytes, |b| i16::from_le_bytes(b) as i64),
        ElemType::I8 => widen::<1>(bytes, |b| b[0] as i8 as i64),
        _ => CpuStorage::from_le_bytes(bytes, dtype)?,
    })
}

/// Wraps a message as this module's format error.
pub(super) fn torch_error(msg: impl Into<String>) -> crate::Error {
    crate::Error::format("torch", msg)
}

/// Loads `spec` from `root`, naming the file and the tensor's path in any error.
pub(super) fn load_tensor(
    spec: &TensorSpec,
    root: &[u8],
    file: &str,
    path: &str,
) -> Result<Tensor> {
    build_tensor(spec, root).map_err(|msg| torch_error(format!("`{file}`: tensor `{path}`: {msg}")))
}
