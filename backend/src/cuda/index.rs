//! index_select, gather, index_add and scatter_add (kernels/index.cu). The kernels read the
//! indices themselves and flag an out-of-range one in the device error word, so no op here
//! waits for the device; the error surfaces at the next host read.

use super::compile::INDEX;
use super::copy::{cast, full};
use super::launch::{args, grid_for, type_suffix, Strided};
use super::sorted_add;
use super::CudaStorage;
use crate::layout::contiguous_strides;
use crate::{DType, Error, Layout, Result};

const BLOCK: u32 = 256;
const MAX_RANK: usize = 8;

/// Error-word codes, as `launch::flag_op_name` names them.
const FLAG_INDEX_SELECT: u32 = 1;
const FLAG_GATHER: u32 = 2;
const FLAG_SCATTER_ADD: u32 = 3;
const FLAG_INDEX_COPY: u32 = 6;

/// Mirrors `struct IndexGeom` in kernels/index.cu: the iteration shape, and the target's
/// strides and offset, with the indexed dim and its size.
#[repr(C)]
#[derive(Clone, Copy)]
struct IndexGeom {
    rank: i32,
    dim: i32,
    dim_size: i64,
    offset: i64,
    shape: [i64; MAX_RANK],
    stride: [i64; MAX_RANK],
}

impl IndexGeom {
    fn new(
        op: &'static str,
        iter_shape: &[usize],
        dim: usize,
        dim_size: usize,
        target_strides: &[usize],
        offset: usize,
    ) -> Result<IndexGeom> {
        if iter_shape.len() > MAX_RANK {
            return Err(Error::invalid(
                op,
                format!("CUDA indexing takes at most {MAX_RANK} dims, got shape {iter_shape:?}"),
            ));
        }
        let mut g = IndexGeom {
            rank: iter_shape.len() as i32,
            dim: dim as i32,
            dim_size: dim_size as i64,
            offset: offset as i64,
            shape: [0; MAX_RANK],
            stride: [0; MAX_RANK],
        };
        for (d, (&n, &s)) in iter_shape.iter().zip(target_strides).enumerate() {
            g.shape[d] = n as i64;
            g.stride[d] = s as i64;
        }
        Ok(g)
    }
}

/// How the kernels read an index tensor's elements (see `load_index`).
fn index_kind(op: &'static str, dtype: DType) -> Result<i32> {
    match dtype {
        DType::U8 => Ok(0),
        DType::U32 => Ok(1),
        DType::I64 => Ok(2),
        _ => Err(Error::UnsupportedDType {
            op,
            dtype,
            detail: ": indices must be integers".into(),
        }),
    }
}

/// A read through an index: `out[i] = x[.., index, ..]` over the iteration shape `out_shape`.
#[allow(clippy::too_many_arguments)]
fn read(
    op: &'static str,
    code: u32,
    x: &CudaStorage,
    lx: &Layout,
    dim: usize,
    idx: &CudaStorage,
    li: &Layout,
    out_shape: &[usize],
    per_element: bool,
) -> Result<CudaStorage> {
    let dev = x.cuda_device();
    let n: usize = out_shape.iter().product();
    let out = CudaStorage::alloc(dev, n, x.dtype())?;
    if n == 0 {
        return Ok(out);
    }
    let g = IndexGeom::new(
        op,
        out_shape,
        dim,
        lx.shape()[dim],
        lx.strides(),
        lx.offset(),
    )?;
    let (is, kind) = (Strided::of(op, li)?, index_kind(op, idx.dtype())?);
    let f = dev.function(&INDEX, &format!("index_read_{}", x.dtype().size_in_bytes()))?;
    let (px, pi, py, pe) = (x.ptr(), idx.ptr(), out.ptr(), per_element as i32);
    let (n, err) = (n as i64, dev.error_word());
    let grid = grid_for(n as usize, BLOCK, dev.sm_count());
    // SAFETY: every target offset the kernel forms lies in x's view once its index is checked
    // against dim_size; the index view lies in its allocation and y holds n elements.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            0,
            &mut args![px, g, pi, is, kind, pe, py, n, err, code],
        )?
    };
    Ok(out)
}

/// index_copy_: writes `src[.., j, ..]` into `y[.., idx[j], ..]` along `dim`, in place. `y` is
/// any view (not a broadcast one: the op checks), `idx` a 0-d or 1-D integer view whose length
/// is src's size along `dim`, `src` any view of y's dtype.
pub fn index_copy(
    y: &mut CudaStorage,
    ly: &Layout,
    dim: usize,
    idx: &CudaStorage,
    li: &Layout,
    src: &CudaStorage,
    ls: &Layout,
) -> Result<()> {
    const OP: &str = "index_copy_";
    let n = ls.numel();
    if n == 0 {
        return Ok(());
    }
    let dev = y.cuda_device().clone();
    let g = IndexGeom::new(
        OP,
        ls.shape(),
        dim,
        ly.shape()[dim],
        ly.strides(),
        ly.offset(),
    )?;
    let (is, ss, kind) = (
        Strided::of(OP, li)?,
        Strided::of(OP, ls)?,
        index_kind(OP, idx.dtype())?,
    );
    let f = dev.function(
        &INDEX,
        &format!("index_write_{}", y.dtype().size_in_bytes()),
    )?;
    let (py, pi, ps) = (y.ptr(), idx.ptr(), src.ptr());
    let (n, err, code) = (n as i64, dev.error_word(), FLAG_INDEX_COPY);
    let grid = grid_for(n as usize, BLOCK, dev.sm_count());
    // SAFETY: every target offset lies in y's view once its index is checked against the dim's
    // size; the index and source views lie in their allocations.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            0,
            &mut args![py, g, pi, is, kind, ps, ss, n, err, code],
        )?
    };
    Ok(())
}

/// The dtype adds accumulate in: F32 for the 16- and 32-bit floats (half types round once, at
/// the end), F64, and I64 for integers and Bool (cast back with saturation, so u8 and u32 sums
/// clamp as the CPU's do, and Bool sums become "any").
fn accumulator(dtype: DType) -> DType {
    match dtype {
        DType::BF16 | DType::F16 | DType::F32 => DType::F32,
        DType::F64 => DType::F64,
        DType::Bool | DType::U8 | DType::U32 | DType::I64 => DType::I64,
    }
}

/// An add through an index: `base` (or zeros of `shape`) with each element of `src` added at
/// its indexed position; `src` has the base's dtype.
#[allow(clippy::too_many_arguments)]
fn accumulate(
    op: &'static str,
    code: u32,
    base: Option<(&CudaStorage, &Layout)>,
    shape: &[usize],
    dim: usize,
    idx: &CudaStorage,
    li: &Layout,
    src: &CudaStorage,
    ls: &Layout,
    per_element: bool,
) -> Result<CudaStorage> {
    let dev = src.cuda_device();
    let dtype = src.dtype();
    let acc_dtype = accumulator(dtype);
    let numel: usize = shape.iter().product();
    let acc = match base {
        Some((b, lb)) => cast(b, lb, acc_dtype)?,
        None => full(dev, numel, acc_dtype, 0.0)?,
    };
    let target = Target {
        ptr: acc.ptr(),
        shape,
    };
    // SAFETY: `acc` is a fresh contiguous buffer of `shape` in the accumulator's dtype.
    unsafe { add_at_indices(op, code, target, dim, idx, li, src, ls, per_element)? };
    if acc_dtype == dtype {
        Ok(acc)
    } else {
        cast(&acc, &Layout::contiguous(shape), dtype)
    }
}

/// A contiguous buffer the adds go into, in the dtype they accumulate in.
pub(super) struct Target<'a> {
    pub(super) ptr: u64,
    pub(super) shape: &'a [usize],
}

/// Adds each element of `src` at its indexed position along `dim` of `target`.
///
/// # Safety
/// `target` must address a live contiguous buffer of its shape in `accumulator(src.dtype())`,
/// on `src`'s device.
#[allow(clippy::too_many_arguments)]
unsafe fn add_at_indices(
    op: &'static str,
    code: u32,
    target: Target<'_>,
    dim: usize,
    idx: &CudaStorage,
    li: &Layout,
    src: &CudaStorage,
    ls: &Layout,
    per_element: bool,
) -> Result<()> {
    let n = ls.numel();
    if n == 0 {
        return Ok(());
    }
    let dev = src.cuda_device();
    let dtype = src.dtype();
    let kind = index_kind(op, idx.dtype())?;
    let is = Strided::of(op, li)?;
    if !per_element && sorted_add::takes(accumulator(dtype)) {
        // SAFETY: the caller's promise about `target`, passed on.
        return unsafe { sorted_add::add(op, code, target, dim, idx, is, kind, src, ls) };
    }
    let shape = target.shape;
    let strides = contiguous_strides(shape);
    let g = IndexGeom::new(op, ls.shape(), dim, shape[dim], &strides, 0)?;
    let ss = Strided::of(op, ls)?;
    // Bool is stored as bytes; its adds are u8 adds.
    let sfx = type_suffix(if dtype == DType::Bool {
        DType::U8
    } else {
        dtype
    });
    let f = dev.function(&INDEX, &format!("index_add_{sfx}"))?;
    let (po, pi, ps, pe) = (target.ptr, idx.ptr(), src.ptr(), per_element as i32);
    let (n, err) = (n as i64, dev.error_word());
    let grid = grid_for(n as usize, BLOCK, dev.sm_count());
    // SAFETY: the target is contiguous of `shape` (the caller's promise) and every offset the
    // kernel forms lies in it once its index is checked; the index and source views lie in
    // their allocations.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            0,
            &mut args![po, g, pi, is, kind, pe, ps, ss, n, err, code],
        )
    }
}

/// Entries `idx` (a 0-d or 1-D integer view) of `x` along `dim`.
pub fn index_select(
    x: &CudaStorage,
    lx: &Layout,
    dim: usize,
    idx: &CudaStorage,
    li: &Layout,
) -> Result<CudaStorage> {
    let mut shape = lx.shape().to_vec();
    shape[dim] = li.numel();
    if let Some(out) = select_rows(x, lx, dim, idx, li)? {
        return Ok(out);
    }
    read(
        "index_select",
        FLAG_INDEX_SELECT,
        x,
        lx,
        dim,
        idx,
        li,
        &shape,
        false,
    )
}

/// index_select of whole rows (dim 0, every row contiguous and a whole number of aligned 16-byte
/// words) in 16-byte words: an embedding's lookup. `None` for any other view.
fn select_rows(
    x: &CudaStorage,
    lx: &Layout,
    dim: usize,
    idx: &CudaStorage,
    li: &Layout,
) -> Result<Option<CudaStorage>> {
    const OP: &str = "index_select";
    if dim != 0 || lx.rank() == 0 {
        return Ok(None);
    }
    let size = x.dtype().size_in_bytes();
    let row: usize = lx.shape()[1..].iter().product();
    let rows_contiguous = Layout::contiguous(&lx.shape()[1..]).strides() == &lx.strides()[1..];
    let fits = rows_contiguous
        && (row * size).is_multiple_of(16)
        && (lx.strides()[0] * size).is_multiple_of(16)
        && x.ptr_at(lx.offset()).is_multiple_of(16);
    let (n, row_words) = (li.numel(), row * size / 16);
    if !fits || n == 0 || row_words == 0 {
        return Ok(None);
    }
    let dev = x.cuda_device();
    let out = CudaStorage::alloc(dev, n * row, x.dtype())?;
    let (is, kind) = (Strided::of(OP, li)?, index_kind(OP, idx.dtype())?);
    let f = dev.function(&INDEX, "index_rows16")?;
    let words = (n * row_words) as i64;
    let (px, stride_words, dim_size) = (
        x.ptr_at(lx.offset()),
        (lx.strides()[0] * size / 16) as i64,
        lx.shape()[0] as i64,
    );
    let (pi, py, rw) = (idx.ptr(), out.ptr(), row_words as i64);
    let (err, code) = (dev.error_word(), FLAG_INDEX_SELECT);
    let grid = grid_for(words as usize, BLOCK, dev.sm_count());
    // SAFETY: row v of x (checked against dim_size in the kernel) spans row_words aligned words
    // at v * stride_words inside x's view; the index view lies in its allocation; y holds n
    // rows of row_words words.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            0,
            &mut args![
                px,
                stride_words,
                dim_size,
                pi,
                is,
                kind,
                py,
                rw,
                words,
                err,
                code
            ],
        )?
    };
    Ok(Some(out))
}

/// torch.gather: an output of the index's shape.
pub fn gather(
    x: &CudaStorage,
    lx: &Layout,
    dim: usize,
    idx: &CudaStorage,
    li: &Layout,
) -> Result<CudaStorage> {
    let shape = li.shape().to_vec();
    read("gather", FLAG_GATHER, x, lx, dim, idx, li, &shape, true)
}

/// index_select's backward: zeros of `shape` with `src[.., j, ..]` added at `idx[j]` along `dim`.
pub fn index_add(
    shape: &[usize],
    dim: usize,
    idx: &CudaStorage,
    li: &Layout,
    src: &CudaStorage,
    ls: &Layout,
) -> Result<CudaStorage> {
    accumulate(
        "index_select",
        FLAG_INDEX_SELECT,
        None,
        shape,
        dim,
        idx,
        li,
        src,
        ls,
        false,
    )
}

/// Whether `index_add_into` takes a target of `dtype`: one its adds accumulate in (F32, F64,
/// I64); half types accumulate in F32 and round once, so they need `index_add`'s buffer.
pub fn adds_in_place(dtype: DType) -> bool {
    accumulator(dtype) == dtype
}

/// index_select's backward added onto `target` in place: `src[.., j, ..]` added at `idx[j]`
/// along `dim`. `target` is a contiguous view that `adds_in_place`, and `src` has its dtype. A
/// gradient that already holds another use's sum (a tied embedding's, from the head) takes the
/// lookup's rows with no buffer of zeros and no add after.
pub fn index_add_into(
    target: &mut CudaStorage,
    lt: &Layout,
    dim: usize,
    idx: &CudaStorage,
    li: &Layout,
    src: &CudaStorage,
    ls: &Layout,
) -> Result<()> {
    const OP: &str = "index_select";
    let fits = lt.is_contiguous()
        && src.dtype() == target.dtype()
        && adds_in_place(target.dtype())
        && dim < lt.rank()
        && ls.rank() == lt.rank()
        && (0..lt.rank()).all(|d| d == dim || ls.shape()[d] == lt.shape()[d]);
    if !fits {
        return Err(Error::invalid(
            OP,
            format!(
                "adding {} {:?} in place needs a contiguous {} target of the same shape off dim \
                 {dim}, got {} {:?}",
                src.dtype(),
                ls.shape(),
                accumulator(src.dtype()),
                target.dtype(),
                lt.shape()
            ),
        ));
    }
    let target = Target {
        ptr: target.ptr_at(lt.offset()),
        shape: lt.shape(),
    };
    // SAFETY: checked above: the view is contiguous in the accumulator's dtype, inside the
    // storage borrowed mutably for the launch.
    unsafe { add_at_indices(OP, FLAG_INDEX_SELECT, target, dim, idx, li, src, ls, false) }
}

/// A contiguous copy of `base` with `src` (the index's shape, the base's dtype) added at the
/// positions the index names along `dim`.
pub fn scatter_add(
    base: &CudaStorage,
    lb: &Layout,
    dim: usize,
    idx: &CudaStorage,
    li: &Layout,
    src: &CudaStorage,
    ls: &Layout,
) -> Result<CudaStorage> {
    accumulate(
        "scatter_add",
        FLAG_SCATTER_ADD,
        Some((base, lb)),
        lb.shape(),
        dim,
        idx,
        li,
        src,
        ls,
        true,
    )
}
