//! LayerNorm and RMSNorm over contiguous rows (kernels/norm.cu). The forward saves per-row mean
//! and rstd; the backward computes dx per row and the weight and bias gradients as a two-step
//! column reduction with a fixed order, so a run repeats bit for bit on the same device.
//!
//! Rows that fit in registers (the usual case) take the register kernels: each block holds
//! its row in registers, loading 16 bytes at a time when the buffers allow it, so x (and the
//! output gradient) are read from memory once; the backward also accumulates a chunk of rows'
//! weight and bias gradients in registers instead of re-reading x and g. Longer rows take the
//! loop kernels, which re-read the row.

use super::compile::NORM;
use super::launch::{args, type_suffix};
use super::{CudaDevice, CudaStorage};
use crate::spec::NormSpec;
use crate::{DType, Error, Result};
use cudarc::driver::{result, sys};
use std::sync::Arc;

/// Threads per block of the column kernels: 32 columns x 8 row lanes (NORM_COL_LANES).
const COLS_BLOCK: u32 = 256;

/// Most threads per block of a register kernel (their `__launch_bounds__`).
const MAX_REG_THREADS: usize = 512;

/// Most loads a thread of a backward register kernel holds: it keeps x, g and the gradient
/// sums for each, so more would spill.
const MAX_BWD_LOADS: usize = 4;

/// Most rows per launch of a forward register kernel; the kernel strides over the rest.
const MAX_ROW_BLOCKS: usize = 1 << 30;

pub struct NormForward {
    pub y: CudaStorage,
    pub mean: CudaStorage,
    pub rstd: CudaStorage,
    /// x + addend in x's dtype, the row that was normed, when an addend was given.
    pub sum: Option<CudaStorage>,
}

pub struct NormGrads {
    pub dx: Option<CudaStorage>,
    pub dweight: Option<CudaStorage>,
    pub dbias: Option<CudaStorage>,
    /// dx again in the output gradient's dtype, when `BackwardInputs::addend_grad` asked.
    pub daddend: Option<CudaStorage>,
}

/// Device addresses of the backward's inputs: `x` and `g` hold rows*cols elements, `w` cols
/// elements of the compute dtype; `mean` and `rstd` come from the forward. `g` has dtype
/// `g_dtype`: x's, or one that `converts_in_kernel` (the backward converts others itself).
///
/// After a forward with an addend (x the sum of a stream and a layer's output), `dsum` holds
/// the gradient that reached the sum from its other uses (rows*cols of x's dtype), added to
/// dx, and `addend_grad` asks for dx again in `g_dtype`, the addend's gradient. Both take the
/// register kernels only (`adds_in_kernel`).
pub struct BackwardInputs<'a> {
    pub x: u64,
    pub g: u64,
    pub g_dtype: DType,
    pub w: Option<u64>,
    pub mean: &'a CudaStorage,
    pub rstd: &'a CudaStorage,
    pub dsum: Option<u64>,
    pub addend_grad: bool,
}

/// How a register kernel covers a row: `vec` elements per load (16 bytes, or 1 when a buffer
/// is misaligned or the row length is not a multiple), `nv` loads held per thread, `threads`
/// per block (a warp multiple; threads * nv * vec >= cols).
#[derive(Clone, Copy)]
struct RowPlan {
    vec: usize,
    nv: usize,
    threads: u32,
}

impl RowPlan {
    /// The plan for rows of `cols` elements of `dtype`, whose buffers (row buffers and
    /// parameters alike, 0 for an absent one) start at `ptrs`; None when the row is too long
    /// for `max_nv` loads per thread.
    fn new(cols: usize, dtype: DType, ptrs: &[u64], max_nv: usize) -> Option<RowPlan> {
        let wide = 16 / dtype.size_in_bytes();
        // Rows start at multiples of cols elements, so aligned buffers keep every row aligned;
        // a parameter in the compute dtype then steps by vec * 4 or 8 bytes, also aligned.
        let aligned = cols.is_multiple_of(wide) && ptrs.iter().all(|p| p.is_multiple_of(16));
        let vec = if aligned { wide } else { 1 };
        let loads = cols / vec;
        // Short rows: one warp, with as few loads per thread as cover the row.
        for nv in [1, 2, 4] {
            if nv <= max_nv && loads <= 32 * nv {
                return Some(RowPlan {
                    vec,
                    nv,
                    threads: 32,
                });
            }
        }
        // Longer rows: several loads in flight per thread (memory-level parallelism with few
        // warps to reduce over), as many warps as cover the row.
        [4, 8]
            .into_iter()
            .find(|&nv| nv <= max_nv && loads <= MAX_REG_THREADS * nv)
            .map(|nv| RowPlan {
                vec,
                nv,
                threads: loads.div_ceil(nv).next_multiple_of(32) as u32,
            })
    }

    /// The kernel name part that picks this plan's instantiation: `v4`, `s2`, ...
    fn tag(self) -> String {
        format!("{}{}", if self.vec > 1 { "v" } else { "s" }, self.nv)
    }
}

/// One block per row for the loop kernels, wide enough for the row, at most a few waves.
fn row_geometry(rows: usize, cols: usize, sm_count: u32) -> (u32, u32) {
    let block = match cols {
        c if c >= 4096 => 512,
        c if c >= 1024 => 256,
        c if c >= 256 => 128,
        _ => 32,
    };
    (rows.min(sm_count as usize * 32).max(1) as u32, block)
}

/// How many blocks of `f` with `threads` threads fit on one multiprocessor at once (at least 1).
fn blocks_per_sm(dev: &Arc<CudaDevice>, f: sys::CUfunction, threads: u32) -> Result<usize> {
    dev.bind()?;
    // SAFETY: `f` is a function loaded in this device's context, which is current.
    let n = unsafe { result::occupancy::max_active_block_per_multiprocessor(f, threads as i32, 0) }
        .map_err(|e| {
            Error::Cuda(format!(
                "cuOccupancyMaxActiveBlocksPerMultiprocessor: {e:?}"
            ))
        })?;
    Ok(n.max(1) as usize)
}

/// Whether rows of `x` dtype have register kernels that read or write `other` (an output, or an
/// output gradient) as it is: F32 rows beside BF16/F16. The norms ahead of a mixed-precision
/// product then skip a cast each way.
pub fn converts_in_kernel(x: DType, other: DType) -> bool {
    x == DType::F32 && matches!(other, DType::BF16 | DType::F16)
}

/// Whether rows of `cols` elements of `dtype`, normed into `out`, can add an addend of dtype
/// `out` in the norm's kernels, forward and backward, whatever the buffers' alignment: the
/// register kernels must cover the row one element a load.
pub fn adds_in_kernel(cols: usize, dtype: DType, out: DType) -> bool {
    (out == dtype || converts_in_kernel(dtype, out))
        && cols > 0
        && cols <= MAX_REG_THREADS * MAX_BWD_LOADS
}

/// `x` (its storage, with the view's offset) holds `rows * cols` contiguous elements; `w` and
/// `b` point at `cols` elements of the compute dtype. The output has dtype `out`: x's, or
/// another float written by the kernel itself where `converts_in_kernel` (otherwise cast after).
///
/// With `addend` (rows*cols elements of dtype `out`, where `adds_in_kernel`), the rows normed
/// are x + addend, returned as `sum` in x's dtype.
pub fn norm_forward(
    x: &CudaStorage,
    x_offset: usize,
    addend: Option<u64>,
    w: Option<u64>,
    b: Option<u64>,
    spec: NormSpec,
    out: DType,
) -> Result<NormForward> {
    let dev = x.cuda_device();
    let (dtype, cdt) = (x.dtype(), x.dtype().compute_dtype());
    let in_kernel = out == dtype || converts_in_kernel(dtype, out);
    let n = spec.rows * spec.cols;
    let y = CudaStorage::alloc(dev, n, if in_kernel { out } else { dtype })?;
    let mean = CudaStorage::alloc(dev, spec.rows, cdt)?;
    let rstd = CudaStorage::alloc(dev, spec.rows, cdt)?;
    let sum = addend
        .map(|_| CudaStorage::alloc(dev, n, dtype))
        .transpose()?;
    if spec.rows == 0 || spec.cols == 0 {
        let y = cast_to(y, spec, out)?;
        return Ok(NormForward { y, mean, rstd, sum });
    }
    let (px, pw, pb, py) = (x.ptr_at(x_offset), w.unwrap_or(0), b.unwrap_or(0), y.ptr());
    let (pa, ps) = (addend.unwrap_or(0), sum.as_ref().map_or(0, |s| s.ptr()));
    let sfx = type_suffix(dtype);
    let to = if out == dtype {
        String::new()
    } else {
        format!("_to_{}", type_suffix(out))
    };
    let plan = RowPlan::new(spec.cols, dtype, &[px, pa, pw, pb, py, ps], 8);
    if addend.is_some() && (plan.is_none() || !adds_in_kernel(spec.cols, dtype, out)) {
        return Err(Error::invalid(
            "rms_norm",
            format!(
                "the residual add takes rows of at most {} elements normed into x's dtype or from F32 into BF16/F16, not {} elements of {dtype} into {out}",
                MAX_REG_THREADS * MAX_BWD_LOADS,
                spec.cols
            ),
        ));
    }
    if plan.is_none() && y.dtype() != dtype {
        // The loop kernels write x's dtype only.
        let y = norm_forward(x, x_offset, None, w, b, spec, dtype)?;
        return Ok(NormForward {
            y: cast_to(y.y, spec, out)?,
            ..y
        });
    }
    // RMSNorm has no mean: the buffer stays unwritten and its backward never reads it.
    let pm = if spec.rms { 0u64 } else { mean.ptr() };
    let (pr, rows, cols, eps, rms) = (
        rstd.ptr(),
        spec.rows as i64,
        spec.cols as i64,
        spec.eps,
        spec.rms as i32,
    );
    match plan {
        Some(plan) => {
            let f = dev.function(&NORM, &format!("norm_fwd_{}_{sfx}{to}", plan.tag()))?;
            let grid = spec.rows.min(MAX_ROW_BLOCKS) as u32;
            // SAFETY: x, y, sum and the addend (when non-null) hold rows*cols elements of the
            // types the kernel declares for this suffix, w and b (when non-null) cols, mean and
            // rstd rows; the plan covers the row with its block and its 16-byte loads are
            // aligned (RowPlan::new).
            unsafe {
                dev.launch(
                    f,
                    (grid, 1, 1),
                    plan.threads,
                    0,
                    &mut args![px, pa, pw, pb, py, ps, pm, pr, rows, cols, eps, rms],
                )?
            };
        }
        None => {
            let f = dev.function(&NORM, &format!("norm_fwd_{sfx}"))?;
            let (grid, block) = row_geometry(spec.rows, spec.cols, dev.sm_count());
            // SAFETY: x and y hold rows*cols elements of x's dtype, w and b (when non-null)
            // cols, mean and rstd rows.
            unsafe {
                dev.launch(
                    f,
                    (grid, 1, 1),
                    block,
                    0,
                    &mut args![px, pw, pb, py, pm, pr, rows, cols, eps, rms],
                )?
            };
        }
    }
    Ok(NormForward {
        y: cast_to(y, spec, out)?,
        mean,
        rstd,
        sum,
    })
}

/// `y` (rows * cols contiguous elements) in dtype `out`: itself, or a converted copy.
fn cast_to(y: CudaStorage, spec: NormSpec, out: DType) -> Result<CudaStorage> {
    if y.dtype() == out {
        return Ok(y);
    }
    super::copy::cast(
        &y,
        &crate::Layout::contiguous(&[spec.rows * spec.cols]),
        out,
    )
}

/// `x` is only used for its device and dtype; the data come through `inp`. `needs` = [dx,
/// dweight, dbias].
pub fn norm_backward(
    inp: BackwardInputs,
    x: &CudaStorage,
    spec: NormSpec,
    needs: [bool; 3],
) -> Result<NormGrads> {
    let dev = x.cuda_device();
    let (dtype, cdt) = (x.dtype(), x.dtype().compute_dtype());
    let (need_w, need_b) = (needs[1], needs[2] && !spec.rms);
    let residual = inp.dsum.is_some() || inp.addend_grad;
    let n = spec.rows * spec.cols;
    // The addend's gradient is dx in another dtype, so the kernel computes dx for it too.
    let dx = (needs[0] || inp.addend_grad)
        .then(|| CudaStorage::alloc(dev, n, dtype))
        .transpose()?;
    let daddend = inp
        .addend_grad
        .then(|| CudaStorage::alloc(dev, n, inp.g_dtype))
        .transpose()?;
    let dweight = need_w
        .then(|| CudaStorage::alloc(dev, spec.cols, cdt))
        .transpose()?;
    let dbias = need_b
        .then(|| CudaStorage::alloc(dev, spec.cols, cdt))
        .transpose()?;
    if spec.cols == 0 {
        return Ok(NormGrads {
            dx,
            dweight,
            dbias,
            daddend,
        });
    }
    if spec.rows == 0 {
        // No rows: the parameter gradients are sums of nothing.
        for s in dweight.iter().chain(dbias.iter()) {
            super::copy::fill(s, &crate::Layout::contiguous(&[spec.cols]), 0.0)?;
        }
        return Ok(NormGrads {
            dx,
            dweight,
            dbias,
            daddend,
        });
    }
    let pdx = dx.as_ref().map_or(0u64, |s| s.ptr());
    let (pds, pda) = (
        inp.dsum.unwrap_or(0),
        daddend.as_ref().map_or(0, |s| s.ptr()),
    );
    let plan = |inp: &BackwardInputs| {
        let ptrs = [inp.x, inp.g, inp.w.unwrap_or(0), pdx, pds, pda];
        RowPlan::new(spec.cols, dtype, &ptrs, MAX_BWD_LOADS)
    };
    if residual && (plan(&inp).is_none() || !adds_in_kernel(spec.cols, dtype, inp.g_dtype)) {
        return Err(Error::invalid(
            "rms_norm",
            format!(
                "the residual's gradient takes rows of at most {} elements with a gradient in x's dtype or BF16/F16 for F32, not {} elements of {dtype} with {}",
                MAX_REG_THREADS * MAX_BWD_LOADS,
                spec.cols,
                inp.g_dtype
            ),
        ));
    }
    // A gradient of another dtype is read as it is by the register kernels that take it, and
    // converted to x's dtype first everywhere else.
    let converted;
    let mut inp = inp;
    if inp.g_dtype != dtype && !(plan(&inp).is_some() && converts_in_kernel(dtype, inp.g_dtype)) {
        converted = CudaStorage::alloc(dev, n, dtype)?;
        super::copy::cast_from_address((inp.g, inp.g_dtype), &converted, n)?;
        inp.g = converted.ptr();
        inp.g_dtype = dtype;
    }
    let partials = match plan(&inp) {
        Some(plan) => {
            let outs = [pdx, pda];
            backward_registers(&inp, dev, dtype, spec, plan, outs, [need_w, need_b])?
        }
        None => backward_loops(&inp, dev, dtype, spec, pdx, [need_w, need_b])?,
    };
    if let Some(p) = partials {
        column_sums(dev, cdt, &p, [&dweight, &dbias], spec.cols)?;
    }
    Ok(NormGrads {
        dx,
        dweight,
        dbias,
        daddend,
    })
}

/// Per-chunk column sums of the weight and bias gradients, [chunks, cols] each (None where
/// not needed).
struct Partials {
    w: Option<CudaStorage>,
    b: Option<CudaStorage>,
    chunks: usize,
}

impl Partials {
    fn alloc(
        dev: &Arc<CudaDevice>,
        cdt: DType,
        chunks: usize,
        cols: usize,
        need: [bool; 2],
    ) -> Result<Self> {
        let buf = |n: bool| {
            n.then(|| CudaStorage::alloc(dev, chunks * cols, cdt))
                .transpose()
        };
        Ok(Partials {
            w: buf(need[0])?,
            b: buf(need[1])?,
            chunks,
        })
    }

    fn ptrs(&self) -> (u64, u64) {
        let ptr = |s: &Option<CudaStorage>| s.as_ref().map_or(0u64, |s| s.ptr());
        (ptr(&self.w), ptr(&self.b))
    }
}

/// dx (into `pdx` when non-zero) and the partial sums in one pass over x and g: one block per
/// chunk of consecutive rows, as many chunks as blocks fit on the device at once.
fn backward_registers(
    inp: &BackwardInputs,
    dev: &Arc<CudaDevice>,
    dtype: DType,
    spec: NormSpec,
    plan: RowPlan,
    [pdx, pda]: [u64; 2],
    need: [bool; 2],
) -> Result<Option<Partials>> {
    let kind = if spec.rms { "rms" } else { "ln" };
    let g = if inp.g_dtype == dtype {
        String::new()
    } else {
        format!("_g_{}", type_suffix(inp.g_dtype))
    };
    let name = format!("norm_bwd_{kind}_{}_{}{g}", plan.tag(), type_suffix(dtype));
    let f = dev.function(&NORM, &name)?;
    let resident = dev.sm_count() as usize * blocks_per_sm(dev, f, plan.threads)?;
    let rows_per_chunk = spec.rows.div_ceil(resident.clamp(1, spec.rows));
    let chunks = spec.rows.div_ceil(rows_per_chunk);
    let partials = (need[0] || need[1])
        .then(|| Partials::alloc(dev, dtype.compute_dtype(), chunks, spec.cols, need))
        .transpose()?;
    if pdx == 0 && partials.is_none() {
        return Ok(None);
    }
    let (ppw, ppb) = partials.as_ref().map_or((0, 0), Partials::ptrs);
    let (px, pg, pw, pds) = (inp.x, inp.g, inp.w.unwrap_or(0), inp.dsum.unwrap_or(0));
    // RMSNorm kernels never read the mean.
    let pm = if spec.rms { 0u64 } else { inp.mean.ptr() };
    let pr = inp.rstd.ptr();
    let (rows, cols, rpc) = (spec.rows as i64, spec.cols as i64, rows_per_chunk as i64);
    // SAFETY: x, dx and dsum (when non-null) hold rows*cols elements of x's dtype, g and the
    // addend's gradient (when non-null) rows*cols of g's; w (when non-null) cols, mean and
    // rstd rows, the partials (when non-null) chunks*cols of the compute dtype. The plan
    // covers a row with one block, and its 16-byte accesses are aligned (RowPlan::new);
    // chunks*rows_per_chunk >= rows.
    unsafe {
        dev.launch(
            f,
            (chunks as u32, 1, 1),
            plan.threads,
            0,
            &mut args![px, pg, pw, pm, pr, pdx, pds, pda, ppw, ppb, rows, cols, rpc],
        )?
    };
    Ok(partials)
}

/// dx and the partial sums for rows too long for registers: a dx kernel, then a column
/// kernel that reads x and g again.
fn backward_loops(
    inp: &BackwardInputs,
    dev: &Arc<CudaDevice>,
    dtype: DType,
    spec: NormSpec,
    pdx: u64,
    need: [bool; 2],
) -> Result<Option<Partials>> {
    let sfx = type_suffix(dtype);
    let (rows, cols) = (spec.rows as i64, spec.cols as i64);
    let rms = spec.rms as i32;
    let (pm, pr) = (inp.mean.ptr(), inp.rstd.ptr());
    if pdx != 0 {
        let f = dev.function(&NORM, &format!("norm_bwd_dx_{sfx}"))?;
        let (grid, block) = row_geometry(spec.rows, spec.cols, dev.sm_count());
        let (px, pg, pw) = (inp.x, inp.g, inp.w.unwrap_or(0));
        // SAFETY: x, g and dx hold rows*cols elements; w (if non-null) cols; mean, rstd rows.
        unsafe {
            dev.launch(
                f,
                (grid, 1, 1),
                block,
                0,
                &mut args![px, pg, pw, pm, pr, pdx, rows, cols, rms],
            )?
        };
    }
    if !(need[0] || need[1]) {
        return Ok(None);
    }
    // Enough row chunks to fill the device a few times over, each at least 8 rows.
    let col_tiles = spec.cols.div_ceil(32);
    let target_blocks = dev.sm_count() as usize * 8;
    let chunks = (target_blocks / col_tiles)
        .clamp(1, spec.rows.div_ceil(8))
        .min(65_535);
    let rows_per_chunk = spec.rows.div_ceil(chunks);
    let chunks = spec.rows.div_ceil(rows_per_chunk);
    let partials = Partials::alloc(dev, dtype.compute_dtype(), chunks, spec.cols, need)?;
    let (ppw, ppb) = partials.ptrs();
    let f = dev.function(&NORM, &format!("norm_bwd_cols_{sfx}"))?;
    let (px, pg, rpc) = (inp.x, inp.g, rows_per_chunk as i64);
    let grid = (col_tiles as u32, chunks as u32, 1);
    // SAFETY: x and g hold rows*cols elements; the partial buffers chunks*cols (or are null and
    // unwritten); the kernel needs exactly COLS_BLOCK threads.
    unsafe {
        dev.launch(
            f,
            grid,
            COLS_BLOCK,
            0,
            &mut args![px, pg, pm, pr, ppw, ppb, rows, cols, rpc, rms],
        )?
    };
    Ok(Some(partials))
}

/// outs[i][j] = the fixed-order sum over chunks of the partials' column j. More chunks than
/// `SPLIT_ABOVE` are summed in splits first, then the splits' sums: a tile of 32 columns is one
/// block, so a narrow row (768 columns: 24 blocks) would otherwise leave most of the device
/// idle while each block reads thousands of chunks one after another.
fn column_sums(
    dev: &Arc<CudaDevice>,
    cdt: DType,
    p: &Partials,
    outs: [&Option<CudaStorage>; 2],
    cols: usize,
) -> Result<()> {
    const SPLIT_ABOVE: usize = 256;
    const SPLITS: usize = 32;
    let sum = dev.function(&NORM, &format!("norm_col_sum_{}", type_suffix(cdt)))?;
    let tiles = cols.div_ceil(32) as u32;
    let launch = |from: u64, to: u64, chunks: usize, splits: usize| {
        let (n_chunks, n_cols) = (chunks as i64, cols as i64);
        // SAFETY: `from` holds chunks*cols elements, `to` splits*cols, both of the compute
        // dtype; the kernel needs exactly COLS_BLOCK threads and one block per 32 columns and
        // split.
        unsafe {
            dev.launch(
                sum,
                (tiles, splits as u32, 1),
                COLS_BLOCK,
                0,
                &mut args![from, to, n_chunks, n_cols],
            )
        }
    };
    for (partial, out) in [(&p.w, outs[0]), (&p.b, outs[1])] {
        if let (Some(part), Some(o)) = (partial, out) {
            if p.chunks > SPLIT_ABOVE {
                let splits = CudaStorage::alloc(dev, SPLITS * cols, cdt)?;
                launch(part.ptr(), splits.ptr(), p.chunks, SPLITS)?;
                launch(splits.ptr(), o.ptr(), SPLITS, 1)?;
            } else {
                launch(part.ptr(), o.ptr(), p.chunks, 1)?;
            }
        }
    }
    Ok(())
}
