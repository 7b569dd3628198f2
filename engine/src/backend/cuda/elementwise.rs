//! Unary, binary, comparison and select kernels (kernels/elementwise.cu).

use super::compile::ELEMENTWISE;
use super::copy::cast;
use super::launch::{args, grid_for, type_suffix, Strided};
use super::CudaStorage;
use crate::ops::kinds::{BinaryOp, CmpOp, UnaryOp};
use crate::{DType, Layout, Result};

const BLOCK: u32 = 256;

/// The kernel's op code and scalar parameters; codes follow the switch in elementwise.cu.
fn unary_code(op: UnaryOp) -> (i32, f64, f64) {
    match op {
        UnaryOp::Neg => (0, 0.0, 0.0),
        UnaryOp::Abs => (1, 0.0, 0.0),
        UnaryOp::Exp => (2, 0.0, 0.0),
        UnaryOp::Log => (3, 0.0, 0.0),
        UnaryOp::Sqrt => (4, 0.0, 0.0),
        UnaryOp::Rsqrt => (5, 0.0, 0.0),
        UnaryOp::Sin => (6, 0.0, 0.0),
        UnaryOp::Cos => (7, 0.0, 0.0),
        UnaryOp::Tanh => (8, 0.0, 0.0),
        UnaryOp::Sigmoid => (9, 0.0, 0.0),
        UnaryOp::Relu => (10, 0.0, 0.0),
        UnaryOp::Gelu => (11, 0.0, 0.0),
        UnaryOp::GeluTanh => (12, 0.0, 0.0),
        UnaryOp::Silu => (13, 0.0, 0.0),
        UnaryOp::Sign => (14, 0.0, 0.0),
        UnaryOp::Pow(e) => (15, e, 0.0),
        UnaryOp::Clamp(lo, hi) => (16, lo, hi),
        UnaryOp::Affine(m, a) => (17, m, a),
        UnaryOp::GeluGrad => (18, 0.0, 0.0),
        UnaryOp::GeluTanhGrad => (19, 0.0, 0.0),
        UnaryOp::SiluGrad => (20, 0.0, 0.0),
    }
}

fn binary_code(op: BinaryOp) -> i32 {
    match op {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
        BinaryOp::Maximum => 4,
        BinaryOp::Minimum => 5,
    }
}

fn cmp_code(op: CmpOp) -> i32 {
    match op {
        CmpOp::Eq => 0,
        CmpOp::Ne => 1,
        CmpOp::Lt => 2,
        CmpOp::Le => 3,
        CmpOp::Gt => 4,
        CmpOp::Ge => 5,
    }
}

/// Bool arithmetic runs as U8 and is turned back into 0/1 by a cast (as the CPU does through
/// f64 and `!= 0`).
fn as_bool(out: CudaStorage, n: usize) -> Result<CudaStorage> {
    cast(&out, &Layout::contiguous(&[n]), DType::Bool)
}

fn numeric_suffix(dtype: DType) -> &'static str {
    type_suffix(if dtype == DType::Bool {
        DType::U8
    } else {
        dtype
    })
}

fn aligned16(ptr: u64) -> bool {
    ptr.is_multiple_of(16)
}

pub fn unary(s: &CudaStorage, l: &Layout, op: UnaryOp) -> Result<CudaStorage> {
    let sfx = numeric_suffix(s.dtype());
    // Kernels read contiguous input; a strided view is packed first.
    let packed;
    let (src, offset) = if l.is_contiguous() {
        (s, l.offset())
    } else {
        packed = cast(s, l, s.dtype())?;
        (&packed, 0)
    };
    let n = l.numel();
    let dev = s.cuda_device();
    let out = CudaStorage::alloc(dev, n, s.dtype())?;
    if n == 0 {
        return Ok(out);
    }
    let f = dev.function(&ELEMENTWISE, &format!("unary_{sfx}"))?;
    let (x, y) = (src.ptr_at(offset), out.ptr());
    let vec = (aligned16(x) && aligned16(y)) as i32;
    let (code, p0, p1) = unary_code(op);
    let n = n as i64;
    let per_thread = if vec == 1 {
        16 / s.dtype().size_in_bytes()
    } else {
        1
    };
    let grid = grid_for((n as usize).div_ceil(per_thread), BLOCK, dev.sm_count());
    // SAFETY: x holds n elements from its offset; y is a fresh allocation of n elements.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            0,
            &mut args![x, y, n, code, p0, p1, vec],
        )?
    };
    if s.dtype() == DType::Bool {
        return as_bool(out, n as usize);
    }
    Ok(out)
}

/// Both operands have one dtype and layouts already broadcast to the output shape.
pub fn binary(
    a: &CudaStorage,
    la: &Layout,
    b: &CudaStorage,
    lb: &Layout,
    op: BinaryOp,
) -> Result<CudaStorage> {
    let sfx = numeric_suffix(a.dtype());
    let n = la.numel();
    let dev = a.cuda_device();
    let out = CudaStorage::alloc(dev, n, a.dtype())?;
    if n == 0 {
        return Ok(out);
    }
    let f = dev.function(&ELEMENTWISE, &format!("binary_{sfx}"))?;
    let (as_, bs) = (Strided::of(op.name(), la)?, Strided::of(op.name(), lb)?);
    let vec = (as_.is_contiguous()
        && bs.is_contiguous()
        && aligned16(a.ptr_at(la.offset()))
        && aligned16(b.ptr_at(lb.offset()))) as i32;
    let (pa, pb, y, n, code) = (a.ptr(), b.ptr(), out.ptr(), n as i64, binary_code(op));
    let per_thread = if vec == 1 {
        16 / a.dtype().size_in_bytes()
    } else {
        1
    };
    let grid = grid_for((n as usize).div_ceil(per_thread), BLOCK, dev.sm_count());
    // SAFETY: both views lie inside their allocations; y holds n elements.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            0,
            &mut args![pa, as_, pb, bs, y, n, code, vec],
        )?
    };
    if a.dtype() == DType::Bool {
        return as_bool(out, n as usize);
    }
    Ok(out)
}

pub fn compare(
    a: &CudaStorage,
    la: &Layout,
    b: &CudaStorage,
    lb: &Layout,
    op: CmpOp,
) -> Result<CudaStorage> {
    let n = la.numel();
    let dev = a.cuda_device();
    let out = CudaStorage::alloc(dev, n, DType::Bool)?;
    if n == 0 {
        return Ok(out);
    }
    let f = dev.function(&ELEMENTWISE, &format!("compare_{}", type_suffix(a.dtype())))?;
    let (as_, bs) = (Strided::of(op.name(), la)?, Strided::of(op.name(), lb)?);
    let (pa, pb, y, n, code) = (a.ptr(), b.ptr(), out.ptr(), n as i64, cmp_code(op));
    let grid = grid_for(n as usize, BLOCK, dev.sm_count());
    // SAFETY: as in `binary`; y holds n bytes.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            0,
            &mut args![pa, as_, pb, bs, y, n, code],
        )?
    };
    Ok(out)
}

/// `c ? a : b` with all three views broadcast to the output shape.
pub fn where_cond(
    c: &CudaStorage,
    lc: &Layout,
    a: &CudaStorage,
    la: &Layout,
    b: &CudaStorage,
    lb: &Layout,
) -> Result<CudaStorage> {
    let n = la.numel();
    let dev = a.cuda_device();
    let out = CudaStorage::alloc(dev, n, a.dtype())?;
    if n == 0 {
        return Ok(out);
    }
    let f = dev.function(&ELEMENTWISE, &format!("where_{}", type_suffix(a.dtype())))?;
    let (cs, as_, bs) = (
        Strided::of("where", lc)?,
        Strided::of("where", la)?,
        Strided::of("where", lb)?,
    );
    let (pc, pa, pb, y, n) = (c.ptr(), a.ptr(), b.ptr(), out.ptr(), n as i64);
    let grid = grid_for(n as usize, BLOCK, dev.sm_count());
    // SAFETY: all views lie inside their allocations; y holds n elements.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            0,
            &mut args![pc, cs, pa, as_, pb, bs, y, n],
        )?
    };
    Ok(out)
}
