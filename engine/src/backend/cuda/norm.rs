//! LayerNorm and RMSNorm over contiguous rows (kernels/norm.cu). The forward saves per-row mean
//! and rstd; the backward computes dx per row and the weight and bias gradients as a two-step
//! column reduction with a fixed order, so a run repeats bit for bit on the same device.

use super::compile::NORM;
use super::launch::{args, grid_for, type_suffix};
use super::CudaStorage;
use crate::ops::norm::NormSpec;
use crate::{DType, Result};

/// Threads per block of the column-partial kernel: 32 columns x 8 row lanes (NORM_COL_LANES).
const COLS_BLOCK: u32 = 256;

pub struct NormForward {
    pub y: CudaStorage,
    pub mean: CudaStorage,
    pub rstd: CudaStorage,
}

pub struct NormGrads {
    pub dx: Option<CudaStorage>,
    pub dweight: Option<CudaStorage>,
    pub dbias: Option<CudaStorage>,
}

/// Device addresses of the backward's inputs: `x` and `g` (x's dtype) hold rows*cols
/// elements, `w` cols elements of the compute dtype; `mean` and `rstd` come from the forward.
pub struct BackwardInputs<'a> {
    pub x: u64,
    pub g: u64,
    pub w: Option<u64>,
    pub mean: &'a CudaStorage,
    pub rstd: &'a CudaStorage,
}

/// The dtype of statistics and parameters for an input dtype.
fn compute(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// One block per row, wide enough for the row, at most a few waves of blocks.
fn row_geometry(rows: usize, cols: usize, sm_count: u32) -> (u32, u32) {
    let block = match cols {
        c if c >= 4096 => 512,
        c if c >= 1024 => 256,
        c if c >= 256 => 128,
        _ => 32,
    };
    (rows.min(sm_count as usize * 32).max(1) as u32, block)
}

/// `x` (its storage, with the view's offset) holds `rows * cols` contiguous elements; `w` and
/// `b` point at `cols` elements of the compute dtype.
pub fn norm_forward(
    x: &CudaStorage,
    x_offset: usize,
    w: Option<u64>,
    b: Option<u64>,
    spec: NormSpec,
) -> Result<NormForward> {
    let dev = x.cuda_device();
    let cdt = compute(x.dtype());
    let y = CudaStorage::alloc(dev, spec.rows * spec.cols, x.dtype())?;
    let mean = CudaStorage::alloc(dev, spec.rows, cdt)?;
    let rstd = CudaStorage::alloc(dev, spec.rows, cdt)?;
    if spec.rows > 0 && spec.cols > 0 {
        let f = dev.function(&NORM, &format!("norm_fwd_{}", type_suffix(x.dtype())))?;
        let (grid, block) = row_geometry(spec.rows, spec.cols, dev.sm_count());
        let (px, pw, pb, py) = (x.ptr_at(x_offset), w.unwrap_or(0), b.unwrap_or(0), y.ptr());
        // RMSNorm has no mean: the buffer stays unwritten and its backward never reads it.
        let pm = if spec.rms { 0u64 } else { mean.ptr() };
        let (pr, rows, cols, eps, rms) = (
            rstd.ptr(),
            spec.rows as i64,
            spec.cols as i64,
            spec.eps,
            spec.rms as i32,
        );
        // SAFETY: x and y hold rows*cols elements, w and b (when non-null) cols, mean and rstd
        // rows, all of the types the kernel declares for this suffix.
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
    Ok(NormForward { y, mean, rstd })
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
    let (dtype, cdt) = (x.dtype(), compute(x.dtype()));
    let sfx = type_suffix(dtype);
    let (rows, cols) = (spec.rows as i64, spec.cols as i64);
    let rms = spec.rms as i32;
    let (pm, pr) = (inp.mean.ptr(), inp.rstd.ptr());
    let empty = spec.rows == 0 || spec.cols == 0;

    let dx = if needs[0] {
        let dx = CudaStorage::alloc(dev, spec.rows * spec.cols, dtype)?;
        if !empty {
            let f = dev.function(&NORM, &format!("norm_bwd_dx_{sfx}"))?;
            let (grid, block) = row_geometry(spec.rows, spec.cols, dev.sm_count());
            let (px, pg, pw, pd) = (inp.x, inp.g, inp.w.unwrap_or(0), dx.ptr());
            // SAFETY: x, g and dx hold rows*cols elements; w (if non-null) cols; mean, rstd rows.
            unsafe {
                dev.launch(
                    f,
                    (grid, 1, 1),
                    block,
                    0,
                    &mut args![px, pg, pw, pm, pr, pd, rows, cols, rms],
                )?
            };
        }
        Some(dx)
    } else {
        None
    };

    let (need_w, need_b) = (needs[1], needs[2] && !spec.rms);
    if !(need_w || need_b) {
        return Ok(NormGrads {
            dx,
            dweight: None,
            dbias: None,
        });
    }
    let dweight = need_w
        .then(|| CudaStorage::alloc(dev, spec.cols, cdt))
        .transpose()?;
    let dbias = need_b
        .then(|| CudaStorage::alloc(dev, spec.cols, cdt))
        .transpose()?;
    let zero = |s: &Option<CudaStorage>| -> Result<()> {
        match s {
            Some(s) => super::copy::fill(s, &crate::Layout::contiguous(&[spec.cols]), 0.0),
            None => Ok(()),
        }
    };
    if spec.cols == 0 {
        return Ok(NormGrads { dx, dweight, dbias });
    }
    if spec.rows == 0 {
        zero(&dweight)?;
        zero(&dbias)?;
        return Ok(NormGrads { dx, dweight, dbias });
    }
    // Enough row chunks to fill the device a few times over, each at least 8 rows.
    let col_tiles = spec.cols.div_ceil(32);
    let target_blocks = dev.sm_count() as usize * 8;
    let chunks = (target_blocks / col_tiles)
        .clamp(1, spec.rows.div_ceil(8))
        .min(65_535);
    let rows_per_chunk = spec.rows.div_ceil(chunks);
    let chunks = spec.rows.div_ceil(rows_per_chunk);
    let pw_buf = need_w
        .then(|| CudaStorage::alloc(dev, chunks * spec.cols, cdt))
        .transpose()?;
    let pb_buf = need_b
        .then(|| CudaStorage::alloc(dev, chunks * spec.cols, cdt))
        .transpose()?;
    let ptr = |s: &Option<CudaStorage>| s.as_ref().map_or(0u64, |s| s.ptr());
    let f = dev.function(&NORM, &format!("norm_bwd_cols_{sfx}"))?;
    let (px, pg, ppw, ppb, rpc) = (
        inp.x,
        inp.g,
        ptr(&pw_buf),
        ptr(&pb_buf),
        rows_per_chunk as i64,
    );
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
    let sum = dev.function(&NORM, &format!("norm_col_sum_{}", type_suffix(cdt)))?;
    let n_chunks = chunks as i64;
    let sum_grid = grid_for(spec.cols, 256, dev.sm_count());
    for (partial, out) in [(&pw_buf, &dweight), (&pb_buf, &dbias)] {
        if let (Some(p), Some(o)) = (partial, out) {
            let (pp, po) = (p.ptr(), o.ptr());
            // SAFETY: p holds chunks*cols elements, o holds cols, both of the compute dtype.
            unsafe {
                dev.launch(
                    sum,
                    (sum_grid, 1, 1),
                    256,
                    0,
                    &mut args![pp, po, n_chunks, cols],
                )?
            };
        }
    }
    Ok(NormGrads { dx, dweight, dbias })
}
