//! index_add of floats in a fixed order (the sorted-add kernels of kernels/index.cu): the
//! entries are sorted by target row, stably, and each row's sum is formed in entry order by one
//! thread per column. Atomics would add in whatever order the threads arrive, so an embedding's
//! gradient would differ in its last bits from one run to the next; this is the same on every
//! run, as the CPU's is.

use super::compile::INDEX;
use super::index::Target;
use super::launch::{args, grid_for, type_suffix, Strided};
use super::{CudaDevice, CudaStorage};
use crate::{DType, Error, Layout, Result};
use std::sync::Arc;

/// Mirrors RB_SORT_BITS and RB_SORT_TILE in kernels/index.cu.
const DIGIT_BITS: u32 = 11;
const TILE: usize = 1024;
/// The columns a block of the row sums covers.
const COLUMNS: u32 = 256;

/// Whether the adds into `acc` (the accumulator's dtype) go through the sort: float sums,
/// whose result would otherwise depend on the order atomics land in. Integer adds associate.
pub(super) fn takes(acc: DType) -> bool {
    matches!(acc, DType::F32 | DType::F64)
}

/// Adds `src[.., j, ..]` at row `idx[j]` along `dim` of `target`, each row's entries in
/// ascending `j`. `kind` is how the kernels read the index (`index_kind`), `code` the error
/// word's code for an out-of-range index.
///
/// # Safety
/// `target` must address a live contiguous buffer of its shape in the accumulator dtype of
/// `src`, on `src`'s device.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn add(
    op: &'static str,
    code: u32,
    target: Target<'_>,
    dim: usize,
    idx: &CudaStorage,
    is: Strided,
    kind: i32,
    src: &CudaStorage,
    ls: &Layout,
) -> Result<()> {
    let dev = src.cuda_device();
    let shape = ls.shape();
    let m = shape[dim];
    let dim_size = target.shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let cols = shape[..dim].iter().product::<usize>() * inner;
    if m == 0 || cols == 0 {
        return Ok(());
    }
    // One block per sorted entry along the grid's x (at most 2^31 - 1), keys below u32::MAX.
    let column_blocks = cols.div_ceil(COLUMNS as usize);
    if m > i32::MAX as usize || dim_size >= u32::MAX as usize || column_blocks > 65535 {
        return Err(Error::invalid(
            op,
            format!(
                "CUDA index_add sorts at most {} entries into {} rows of at most {} columns, got \
                 {m} entries, {dim_size} rows, {cols} columns",
                i32::MAX,
                u32::MAX - 1,
                65535 * COLUMNS
            ),
        ));
    }
    let (keys, vals) = sort_by_row(dev, idx, is, kind, m, dim_size, code)?;
    let f = dev.function(
        &INDEX,
        &format!("sorted_add_rows_{}", type_suffix(src.dtype())),
    )?;
    let (po, pk, pv, ps) = (target.ptr, keys.ptr(), vals.ptr(), src.ptr());
    let ss = Strided::of(op, ls)?;
    let (m, dim_size, inner, cols) = (m as i64, dim_size as i64, inner as i64, cols as i64);
    // SAFETY: keys and values hold m entries; every key below dim_size names a row of the
    // target (the caller's promise for its shape), and every value an entry of src's view.
    unsafe {
        dev.launch(
            f,
            (m as u32, column_blocks as u32, 1),
            COLUMNS,
            0,
            &mut args![po, pk, pv, m, dim_size, inner, cols, ps, ss],
        )
    }
}

/// The index's rows (checked against `dim_size`; an out-of-range one is flagged and sorts
/// last) and the entries' positions, sorted by row, stably: one radix pass per 11 bits of
/// `dim_size`.
fn sort_by_row(
    dev: &Arc<CudaDevice>,
    idx: &CudaStorage,
    is: Strided,
    kind: i32,
    m: usize,
    dim_size: usize,
    code: u32,
) -> Result<(CudaStorage, CudaStorage)> {
    let alloc = |n| CudaStorage::alloc(dev, n, DType::U32);
    let (mut keys, mut vals) = (alloc(m)?, alloc(m)?);
    let (mut keys_out, mut vals_out) = (alloc(m)?, alloc(m)?);
    let tiles = m.div_ceil(TILE);
    let hist = alloc(tiles << DIGIT_BITS)?;
    let grid = grid_for(m, 256, dev.sm_count());
    let (pi, pk, pv, err) = (idx.ptr(), keys.ptr(), vals.ptr(), dev.error_word());
    let (m64, rows) = (m as i64, dim_size as i64);
    // SAFETY: the index view lies in its allocation; keys and vals hold m entries.
    unsafe {
        dev.launch(
            dev.function(&INDEX, "sorted_add_keys")?,
            (grid, 1, 1),
            256,
            0,
            &mut args![pi, is, kind, m64, rows, pk, pv, err, code],
        )?
    };
    // The keys run up to dim_size itself (the out-of-range mark).
    let bits = usize::BITS - dim_size.leading_zeros();
    let (tiles64, ph, n_hist) = (tiles as i64, hist.ptr(), (tiles << DIGIT_BITS) as i64);
    for pass in 0..bits.div_ceil(DIGIT_BITS).max(1) {
        let shift = (pass * DIGIT_BITS) as i32;
        let (pk, pv, pko, pvo) = (keys.ptr(), vals.ptr(), keys_out.ptr(), vals_out.ptr());
        // SAFETY: the keys hold m entries and the histogram `tiles` counts per digit; the
        // scatter writes each entry to a distinct slot below m (the scan's prefixes of counts
        // that sum to m).
        unsafe {
            dev.launch(
                dev.function(&INDEX, "sorted_add_hist")?,
                (tiles as u32, 1, 1),
                32,
                0,
                &mut args![pk, m64, shift, ph, tiles64],
            )?;
            dev.launch(
                dev.function(&INDEX, "sorted_add_scan")?,
                (1, 1, 1),
                1024,
                0,
                &mut args![ph, n_hist],
            )?;
            dev.launch(
                dev.function(&INDEX, "sorted_add_scatter")?,
                (tiles as u32, 1, 1),
                32,
                0,
                &mut args![pk, pv, m64, shift, ph, tiles64, pko, pvo],
            )?;
        }
        std::mem::swap(&mut keys, &mut keys_out);
        std::mem::swap(&mut vals, &mut vals_out);
    }
    Ok((keys, vals))
}
