//! Rotary position embedding in one pass (kernels/rope.cu), forward and transposed (backward).

use super::compile::ROPE;
use super::launch::{args, grid_for, type_suffix};
use super::CudaStorage;
use crate::{Error, Result};

/// Strides of the first three dims of a [n0, n1, n2, dim] view; mirrors `RopeView`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct RopeView {
    s0: i64,
    s1: i64,
    s2: i64,
}

/// One [n0, n1, n2, dim] operand with a contiguous last dim.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub storage: &'a CudaStorage,
    pub offset: usize,
    pub strides: [usize; 3],
}

impl View<'_> {
    fn raw(&self) -> (u64, RopeView) {
        let [s0, s1, s2] = self.strides.map(|s| s as i64);
        (self.storage.ptr_at(self.offset), RopeView { s0, s1, s2 })
    }
}

/// y = rope(x) (or its transpose with `inverse`) into a fresh buffer of `out_len` elements
/// written through `out_strides`; cos and sin are F32.
pub fn rope(
    x: View,
    cos: View,
    sin: View,
    dims: [usize; 4],
    out: ([usize; 3], usize),
    inverse: bool,
) -> Result<CudaStorage> {
    let dev = x.storage.cuda_device();
    let y = CudaStorage::alloc(dev, out.1, x.storage.dtype())?;
    let [n0, n1, n2, dim] = dims;
    let pairs = n0 * n1 * n2 * (dim / 2);
    if pairs == 0 {
        return Ok(y);
    }
    if pairs >= i32::MAX as usize {
        return Err(Error::invalid(
            "rotary_embedding",
            format!("{pairs} element pairs exceed the kernel's 32-bit indexing"),
        ));
    }
    let f = dev.function(&ROPE, &format!("rope_{}", type_suffix(x.storage.dtype())))?;
    let yv = View {
        storage: &y,
        offset: 0,
        strides: out.0,
    };
    let ((xp, xv), (cp, cv), (sp, sv), (yp, yvv)) = (x.raw(), cos.raw(), sin.raw(), yv.raw());
    let (n1, n2, half, inv, p) = (
        n1 as i32,
        n2 as i32,
        (dim / 2) as i32,
        inverse as i32,
        pairs as i64,
    );
    let block = 256;
    let grid = grid_for(pairs, block, dev.sm_count());
    // SAFETY: every view addresses [n0, n1, n2, dim] elements inside its storage (the caller
    // builds them from tensor layouts); y has out.1 elements covering out.0's reach.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            block,
            0,
            &mut args![xp, xv, cp, cv, sp, sv, yp, yvv, n1, n2, half, inv, p],
        )?
    };
    Ok(y)
}
