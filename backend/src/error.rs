//! The one error type of the engine. Every public function returns `Result`; a panic is a bug.

use crate::{DType, Device};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op}: shape mismatch between {lhs:?} and {rhs:?}")]
    ShapeMismatch {
        op: &'static str,
        lhs: Vec<usize>,
        rhs: Vec<usize>,
    },

    /// A layer given an input it cannot take, said from the layer's side: `layer` describes it
    /// (`Linear(64→64)`), `expected` what it takes (`input [..., 64]`), `got` what came.
    #[error("{layer} expects {expected}, got {got}")]
    LayerInput {
        layer: String,
        expected: String,
        got: String,
    },

    #[error("{op}: cannot broadcast {lhs:?} with {rhs:?}")]
    BroadcastMismatch {
        op: &'static str,
        lhs: Vec<usize>,
        rhs: Vec<usize>,
    },

    #[error("{op}: dimension {dim} is out of range for a tensor of rank {rank}")]
    DimOutOfRange {
        op: &'static str,
        dim: isize,
        rank: usize,
    },

    #[error("{op}: {msg}")]
    InvalidArgument { op: &'static str, msg: String },

    #[error("{op}: dtype {dtype:?} is not supported{detail}")]
    UnsupportedDType {
        op: &'static str,
        dtype: DType,
        detail: String,
    },

    #[error("{op}: dtype mismatch, {lhs:?} vs {rhs:?}")]
    DTypeMismatch {
        op: &'static str,
        lhs: DType,
        rhs: DType,
    },

    #[error("{op}: tensors are on different devices, {lhs} and {rhs}")]
    DeviceMismatch {
        op: &'static str,
        lhs: Device,
        rhs: Device,
    },

    #[error("{op}: index {index} is out of range for size {size}")]
    IndexOutOfRange {
        op: &'static str,
        index: i64,
        size: usize,
    },

    #[error("backward: op `{op}` has no backward, so gradients cannot flow through it")]
    NoBackward { op: &'static str },

    #[error("backward: a tensor saved by `{op}` was modified in place after it was saved (version {saved} -> {now}); compute the gradient before writing into it, or write into a copy")]
    SavedTensorModified {
        op: &'static str,
        saved: u64,
        now: u64,
    },

    #[error("backward: the graph through `{op}` was already freed by an earlier backward(); pass retain_graph to call backward twice")]
    GraphFreed { op: &'static str },

    #[error("backward: {0}")]
    Backward(String),

    #[error("{op}: in-place write into a leaf tensor that requires grad; wrap it in no_grad or detach it first")]
    InPlaceOnLeaf { op: &'static str },

    /// A buffer that does not fit: refused before allocating (host) or by the device's pool.
    /// `shape` is empty and `op` is `alloc` where the allocator alone knows of the request.
    #[error(
        "{op}: out of memory on {device}: {}",
        oom_detail(shape, dtype, *requested, *available)
    )]
    OutOfMemory {
        op: &'static str,
        shape: Vec<usize>,
        dtype: Option<DType>,
        device: Device,
        requested: usize,
        available: usize,
    },

    #[error("{op}: not implemented on {device} yet; move the tensor to the CPU with .to(\"cpu\") for this op")]
    UnsupportedDevice { op: &'static str, device: Device },

    #[error("CUDA: {0}")]
    Cuda(String),

    #[error("kernels/{file} failed to compile:\n{log}")]
    KernelCompile { file: &'static str, log: String },

    #[error("device {0} is not available: {1}")]
    DeviceUnavailable(Device, String),

    #[error("{format}: {msg}")]
    Format { format: &'static str, msg: String },

    #[error("io error on {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },

    #[error("state dict: {0}")]
    StateDict(String),

    #[error("cancelled")]
    Cancelled,
}

pub type Result<T> = std::result::Result<T, Error>;

/// `shape [2, 3] of f32 needs 24 bytes (24 B); 8 bytes (8 B) are available`, or without a
/// shape `24 bytes (24 B) asked for; ...` when only the allocator knew of the request.
fn oom_detail(
    shape: &[usize],
    dtype: &Option<DType>,
    requested: usize,
    available: usize,
) -> String {
    use crate::memory::human_bytes;
    let asked = format!("{requested} bytes ({})", human_bytes(requested));
    let what = match (shape.is_empty(), dtype) {
        (true, _) => format!("{asked} asked for"),
        (false, Some(d)) => format!("shape {shape:?} of {d} needs {asked}"),
        (false, None) => format!("shape {shape:?} needs {asked}"),
    };
    format!(
        "{what}; {available} bytes ({}) are available",
        human_bytes(available)
    )
}

/// The op name of an `OutOfMemory` raised by an allocator that does not know the op.
pub const ALLOC_OP: &str = "alloc";

impl Error {
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            msg: msg.into(),
        }
    }

    pub fn format(format: &'static str, msg: impl Into<String>) -> Self {
        Error::Format {
            format,
            msg: msg.into(),
        }
    }

    pub fn layer_input(
        layer: impl Into<String>,
        expected: impl Into<String>,
        got: impl Into<String>,
    ) -> Self {
        Error::LayerInput {
            layer: layer.into(),
            expected: expected.into(),
            got: got.into(),
        }
    }

    /// Names the op (and the shape, when known) of an out-of-memory error raised below it;
    /// every other error passes through.
    pub fn in_op(self, op: &'static str, shape: &[usize], dtype: Option<DType>) -> Self {
        match self {
            Error::OutOfMemory {
                op: o,
                shape: s,
                dtype: d,
                device,
                requested,
                available,
            } if o == ALLOC_OP => Error::OutOfMemory {
                op,
                shape: if s.is_empty() { shape.to_vec() } else { s },
                dtype: d.or(dtype),
                device,
                requested,
                available,
            },
            e => e,
        }
    }

    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}

/// Returns early with an `InvalidArgument` error.
#[macro_export]
macro_rules! bail {
    ($op:expr, $($arg:tt)*) => {
        return Err($crate::Error::InvalidArgument { op: $op, msg: format!($($arg)*) })
    };
}
