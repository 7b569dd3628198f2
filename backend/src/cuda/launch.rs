//! Kernel arguments and launch geometry shared by the CUDA op files.

use crate::{DType, Error, Layout, Result};

pub(crate) const MAX_DIMS: usize = 8;

/// A view as kernels see it; mirrors `struct Strided` in kernels/common.cuh. Rank 0 means
/// contiguous from `offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Strided {
    rank: i32,
    /// 1 when the view has fewer than 2^32 elements, so kernels index it in 32-bit arithmetic.
    small: i32,
    pub offset: i64,
    shape: [i64; MAX_DIMS],
    stride: [i64; MAX_DIMS],
}

impl Strided {
    /// A contiguous run of elements starting at `offset`.
    pub fn contiguous(offset: usize) -> Strided {
        Strided {
            rank: 0,
            small: 0,
            offset: offset as i64,
            shape: [0; MAX_DIMS],
            stride: [0; MAX_DIMS],
        }
    }

    /// `layout` with size-1 dims dropped and mergeable neighbours merged, so index arithmetic
    /// stays cheap; a contiguous layout becomes rank 0.
    pub fn of(op: &'static str, layout: &Layout) -> Result<Strided> {
        if layout.is_contiguous() {
            return Ok(Strided::contiguous(layout.offset()));
        }
        let mut dims: Vec<(usize, usize)> = Vec::with_capacity(layout.rank());
        for (&n, &s) in layout.shape().iter().zip(layout.strides()) {
            if n == 1 {
                continue;
            }
            match dims.last_mut() {
                Some(last) if last.1 == n * s => *last = (last.0 * n, s),
                _ => dims.push((n, s)),
            }
        }
        if dims.len() > MAX_DIMS {
            return Err(Error::invalid(
                op,
                format!(
                    "CUDA kernels take views of at most {MAX_DIMS} non-mergeable dims, got shape {:?} with strides {:?}; call contiguous() first",
                    layout.shape(),
                    layout.strides()
                ),
            ));
        }
        let mut s = Strided::contiguous(layout.offset());
        if dims.len() == 1 && dims[0].1 == 1 {
            return Ok(s);
        }
        s.rank = dims.len() as i32;
        s.small = (layout.numel() <= u32::MAX as usize) as i32;
        for (d, (n, st)) in dims.into_iter().enumerate() {
            s.shape[d] = n as i64;
            s.stride[d] = st as i64;
        }
        Ok(s)
    }

    pub fn is_contiguous(&self) -> bool {
        self.rank == 0
    }
}

/// The suffix kernels use for a dtype (`unary_f32`, `cast_bf16_f32`, ...): its name.
pub(crate) fn type_suffix(dtype: DType) -> &'static str {
    dtype.name()
}

/// A grid for a grid-stride loop over `n` items: enough blocks to fill the device a few times
/// over, no more.
pub(crate) fn grid_for(n: usize, block: u32, sm_count: u32) -> u32 {
    let needed = n.div_ceil(block as usize).max(1);
    needed.min(sm_count as usize * 16) as u32
}

/// Pointers to a kernel's arguments, in order: `args![a, b, c]` for locals `a`, `b`, `c`
/// whose types match the kernel's parameters exactly.
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$( &$a as *const _ as *mut ::std::ffi::c_void ),*]
    };
}
pub(crate) use args;

/// What a kernel writes into the device's error word when it meets a bad index; read back by
/// `CudaDevice::synchronize`.
pub(crate) fn flag_op_name(word: u32) -> &'static str {
    match word {
        1 => "index_select",
        2 => "gather",
        3 => "scatter_add",
        4 => "embedding",
        5 => "cross_entropy",
        6 => "index_copy_",
        7 => "the rotary cache write (its cursor is outside the cache)",
        _ => "a CUDA kernel",
    }
}
