//! BatchNorm over contiguous [outer, channels, inner] tensors (kernels/batch_norm.cu), in three
//! launches each way:
//! - forward: per-chunk partial sums, a per-channel finalize (mean, rstd and the running
//!   statistics updated in place), then normalize and affine in one pass;
//! - backward: per-chunk sums of g and g * (x - mean), a per-channel finalize (the weight and
//!   bias gradients, and the input gradient's three coefficients), then the input gradient.
//!
//! The chunking depends only on the shape and the device's multiprocessor count, and partials
//! are added in a fixed order, so a run repeats bit for bit on the same device.

use super::compile::BATCH_NORM;
use super::launch::{args, grid_for, type_suffix};
use super::{CudaDevice, CudaStorage};
use crate::spec::BatchNormSpec;
use crate::{DType, Error, Result};
use std::sync::Arc;

/// Threads per block of the partial-sum kernels (BN_THREADS in the kernel file).
const THREADS: u32 = 256;

/// Threads per block of the elementwise and per-channel kernels.
const BLOCK: u32 = 256;

/// Blocks of THREADS that one multiprocessor runs at once; the partial sums aim at filling
/// the device once.
const BLOCKS_PER_SM: usize = 8;

/// The running statistics to update in place (device addresses of `channels` values of the
/// compute dtype), with the weight of this batch.
pub struct RunningStats {
    pub mean: u64,
    pub var: u64,
    pub momentum: f64,
}

/// Per-channel mean and 1 / sqrt(var + eps) of a batch, in the compute dtype.
pub struct Stats {
    pub mean: CudaStorage,
    pub rstd: CudaStorage,
}

/// What the backward reads: `x` and `g` (x's dtype, `spec.numel()` contiguous values),
/// per-channel `mean` and `rstd` (from the forward, or the running statistics in eval mode) and
/// the weight (`channels` values of the compute dtype) when there is one.
pub struct GradInputs {
    pub x: u64,
    pub g: u64,
    pub mean: u64,
    pub rstd: u64,
    pub w: Option<u64>,
    /// The bias, read when `spec.act` is not `None` (the backward recomputes the norm's output).
    pub b: Option<u64>,
}

/// Mirrors `BnGradArgs` in batch_norm.cu: what the backward's kernels need per channel to
/// recompute the norm's output for the activation's derivative.
#[repr(C)]
#[derive(Clone, Copy)]
struct GradArgs {
    mean: u64,
    rstd: u64,
    w: u64,
    b: u64,
    act: i32,
    _pad: i32,
}
const _: () = assert!(std::mem::size_of::<GradArgs>() == 40);

pub struct Grads {
    pub dx: Option<CudaStorage>,
    pub dweight: Option<CudaStorage>,
    pub dbias: Option<CudaStorage>,
}

/// How the kernels step through a tensor: `vec` elements a step (a 16-byte word when every
/// buffer is aligned and inner is a multiple of the word, otherwise one).
#[derive(Clone, Copy)]
struct Plan {
    vec: usize,
    /// Steps per plane and per channel.
    inner_v: u32,
    count_v: u32,
    /// Steps in the whole tensor, and whether that fits 32-bit index arithmetic.
    total_v: i64,
    narrow: i32,
}

impl Plan {
    fn new(spec: BatchNormSpec, dtype: DType, ptrs: &[u64]) -> Result<Plan> {
        let wide = 16 / dtype.size_in_bytes();
        let aligned = spec.inner.is_multiple_of(wide) && ptrs.iter().all(|p| p.is_multiple_of(16));
        let vec = if aligned { wide } else { 1 };
        let too_big = || {
            Error::invalid(
                "batch_norm",
                format!(
                    "a channel of {} values is more than the CUDA kernels index (2^32 steps)",
                    spec.count()
                ),
            )
        };
        let count_v = u32::try_from(spec.count() / vec).map_err(|_| too_big())?;
        if spec.channels > 65_535 {
            return Err(Error::invalid(
                "batch_norm",
                format!(
                    "{} channels; the CUDA kernels take at most 65535",
                    spec.channels
                ),
            ));
        }
        let total_v = spec.numel() / vec;
        Ok(Plan {
            vec,
            inner_v: (spec.inner / vec) as u32,
            count_v,
            total_v: total_v as i64,
            narrow: (total_v <= u32::MAX as usize) as i32,
        })
    }

    fn tag(self) -> &'static str {
        if self.vec > 1 {
            "v"
        } else {
            "s"
        }
    }

    /// Chunks per channel and steps per chunk: enough blocks to fill the device once, each
    /// thread taking at least two steps.
    fn chunks(self, channels: usize, sm_count: u32) -> (usize, u32) {
        let target = (sm_count as usize * BLOCKS_PER_SM).div_ceil(channels);
        let by_work = (self.count_v as usize)
            .div_ceil(THREADS as usize * 2)
            .max(1);
        let chunks = target.clamp(1, by_work);
        let per_chunk = (self.count_v as usize).div_ceil(chunks).max(1);
        (
            (self.count_v as usize).div_ceil(per_chunk).max(1),
            per_chunk as u32,
        )
    }
}

/// Partial sums, [channels, chunks] each.
struct Partials {
    a: CudaStorage,
    b: CudaStorage,
    chunks: usize,
}

/// The operands of `bn_partials_<kind>`: x alone (statistics), or x, g and the backward's
/// per-channel arguments.
enum PartialInputs {
    Stats(u64),
    Grad(u64, u64, GradArgs),
}

/// Runs `bn_partials_<kind>` over the tensor.
fn partials(
    dev: &Arc<CudaDevice>,
    dtype: DType,
    plan: Plan,
    spec: BatchNormSpec,
    inputs: PartialInputs,
) -> Result<Partials> {
    let kind = match inputs {
        PartialInputs::Stats(_) => "stats",
        PartialInputs::Grad(..) => "grad",
    };
    let (chunks, per_chunk) = plan.chunks(spec.channels, dev.sm_count());
    let cdt = dtype.compute_dtype();
    let a = CudaStorage::alloc(dev, spec.channels * chunks, cdt)?;
    let b = CudaStorage::alloc(dev, spec.channels * chunks, cdt)?;
    let name = format!("bn_partials_{kind}_{}_{}", plan.tag(), type_suffix(dtype));
    let f = dev.function(&BATCH_NORM, &name)?;
    let (pa, pb, channels) = (a.ptr(), b.ptr(), spec.channels as i64);
    let (inner_v, count_v) = (plan.inner_v, plan.count_v);
    let grid = (chunks as u32, spec.channels as u32, 1);
    // SAFETY: x (and g) hold spec.numel() values of `dtype`, mean `channels` of the compute
    // dtype, the partials channels * chunks; chunks * per_chunk >= count_v, and the 16-byte
    // steps of the `v` kernels are aligned (Plan::new).
    unsafe {
        match inputs {
            PartialInputs::Stats(x) => dev.launch(
                f,
                grid,
                THREADS,
                0,
                &mut args![x, pa, pb, channels, inner_v, count_v, per_chunk],
            )?,
            PartialInputs::Grad(x, g, ga) => dev.launch(
                f,
                grid,
                THREADS,
                0,
                &mut args![x, g, ga, pa, pb, channels, inner_v, count_v, per_chunk],
            )?,
        }
    };
    Ok(Partials { a, b, chunks })
}

/// This batch's per-channel statistics of `x` (from its storage's element `x_offset`), and the
/// running statistics updated when given. `spec.count()` must be at least 1.
pub fn stats(
    x: &CudaStorage,
    x_offset: usize,
    spec: BatchNormSpec,
    running: Option<RunningStats>,
) -> Result<Stats> {
    let dev = x.cuda_device();
    let (dtype, cdt) = (x.dtype(), x.dtype().compute_dtype());
    let px = x.ptr_at(x_offset);
    let plan = Plan::new(spec, dtype, &[px])?;
    let p = partials(dev, dtype, plan, spec, PartialInputs::Stats(px))?;
    let mean = CudaStorage::alloc(dev, spec.channels, cdt)?;
    let rstd = CudaStorage::alloc(dev, spec.channels, cdt)?;
    let f = dev.function(
        &BATCH_NORM,
        &format!("bn_stats_finalize_{}", type_suffix(dtype)),
    )?;
    let (pa, pb, chunks) = (p.a.ptr(), p.b.ptr(), p.chunks as i64);
    let (channels, inner) = (spec.channels as i64, spec.inner as i64);
    let (count, eps) = (spec.count() as f64, spec.eps);
    let (rmean, rvar, momentum) =
        running.map_or((0u64, 0u64, 0.0), |r| (r.mean, r.var, r.momentum));
    let (pm, pr) = (mean.ptr(), rstd.ptr());
    // SAFETY: the partials hold channels * chunks values, mean and rstd (and the running
    // statistics, when non-null) `channels` values of the compute dtype; x's channel c starts
    // at element c * inner.
    unsafe {
        dev.launch(
            f,
            (spec.channels.div_ceil(BLOCK as usize) as u32, 1, 1),
            BLOCK,
            0,
            &mut args![
                px, pa, pb, chunks, channels, inner, count, eps, momentum, rmean, rvar, pm, pr
            ],
        )?
    };
    Ok(Stats { mean, rstd })
}

/// Per-channel operands of `apply`: device addresses of `channels` values of the compute dtype
/// (the statistics to normalize with, and the affine weight and bias when there are any).
pub struct Affine {
    pub mean: u64,
    pub rstd: u64,
    pub w: Option<u64>,
    pub b: Option<u64>,
}

/// y = (x - mean) * rstd * w + b per channel (then `spec.act`), in x's dtype.
pub fn apply(
    x: &CudaStorage,
    x_offset: usize,
    affine: Affine,
    spec: BatchNormSpec,
) -> Result<CudaStorage> {
    let dev = x.cuda_device();
    let dtype = x.dtype();
    let y = CudaStorage::alloc(dev, spec.numel(), dtype)?;
    if spec.numel() == 0 {
        return Ok(y);
    }
    let (px, py) = (x.ptr_at(x_offset), y.ptr());
    let plan = Plan::new(spec, dtype, &[px, py])?;
    let f = dev.function(
        &BATCH_NORM,
        &format!("bn_apply_{}_{}", plan.tag(), type_suffix(dtype)),
    )?;
    let (pm, pr) = (affine.mean, affine.rstd);
    let (pw, pb) = (affine.w.unwrap_or(0), affine.b.unwrap_or(0));
    let (channels, inner_v, total_v, narrow, act) = (
        spec.channels as i64,
        plan.inner_v,
        plan.total_v,
        plan.narrow,
        spec.act.code(),
    );
    let grid = grid_for(plan.total_v as usize, BLOCK, dev.sm_count());
    // SAFETY: x and y hold spec.numel() values of `dtype`, the per-channel buffers `channels`
    // of the compute dtype (w and b may be null); the `v` kernel's steps are aligned.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            0,
            &mut args![px, pm, pr, pw, pb, py, channels, inner_v, total_v, narrow, act],
        )?
    };
    Ok(y)
}

/// The gradients of x (its dtype), the weight and the bias (compute dtype), each when `needs`
/// says so ([dx, dweight, dbias]). `batch_stats`: the forward normalized with the batch's own
/// statistics, so dx also flows through them. `x` gives the device and the dtype.
pub fn backward(
    inp: GradInputs,
    x: &CudaStorage,
    spec: BatchNormSpec,
    batch_stats: bool,
    needs: [bool; 3],
) -> Result<Grads> {
    let dev = x.cuda_device();
    let (dtype, cdt) = (x.dtype(), x.dtype().compute_dtype());
    let alloc =
        |need: bool, n: usize, dt: DType| need.then(|| CudaStorage::alloc(dev, n, dt)).transpose();
    let dx = alloc(needs[0], spec.numel(), dtype)?;
    let dweight = alloc(needs[1], spec.channels, cdt)?;
    let dbias = alloc(needs[2], spec.channels, cdt)?;
    let pdx = dx.as_ref().map_or(0u64, |s| s.ptr());
    let plan = Plan::new(spec, dtype, &[inp.x, inp.g, pdx])?;
    // The sums are needed for the parameters, and for dx when it flows through the statistics.
    let summed = needs[1] || needs[2] || (needs[0] && batch_stats);
    let ga = GradArgs {
        mean: inp.mean,
        rstd: inp.rstd,
        w: inp.w.unwrap_or(0),
        b: inp.b.unwrap_or(0),
        act: spec.act.code(),
        _pad: 0,
    };
    let p = if summed && spec.count() > 0 {
        let inputs = PartialInputs::Grad(inp.x, inp.g, ga);
        Some(partials(dev, dtype, plan, spec, inputs)?)
    } else {
        None
    };
    let k = alloc(needs[0], 3 * spec.channels, cdt)?;
    let f = dev.function(
        &BATCH_NORM,
        &format!("bn_grad_finalize_{}", type_suffix(cdt)),
    )?;
    let (pa, pb, chunks) = p.as_ref().map_or((0u64, 0u64, 0i64), |p| {
        (p.a.ptr(), p.b.ptr(), p.chunks as i64)
    });
    let ptr = |s: &Option<CudaStorage>| s.as_ref().map_or(0u64, |s| s.ptr());
    let (pdw, pdb, pk) = (ptr(&dweight), ptr(&dbias), ptr(&k));
    let (channels, pr, pw) = (spec.channels as i64, inp.rstd, inp.w.unwrap_or(0));
    let (count, batch) = (spec.count() as f64, batch_stats as i32);
    // SAFETY: the partials (when non-null) hold channels * chunks values, rstd, w (when
    // non-null), dweight and dbias `channels`, k 3 * channels, all of the compute dtype.
    unsafe {
        dev.launch(
            f,
            (spec.channels.div_ceil(BLOCK as usize) as u32, 1, 1),
            BLOCK,
            0,
            &mut args![pa, pb, chunks, channels, pr, pw, count, batch, pdw, pdb, pk],
        )?
    };
    if let Some(k) = &k {
        if spec.numel() > 0 {
            let f = dev.function(
                &BATCH_NORM,
                &format!("bn_grad_input_{}_{}", plan.tag(), type_suffix(dtype)),
            )?;
            let (px, pg, pk) = (inp.x, inp.g, k.ptr());
            let (inner_v, total_v, narrow) = (plan.inner_v, plan.total_v, plan.narrow);
            let grid = grid_for(plan.total_v as usize, BLOCK, dev.sm_count());
            // SAFETY: x, g and dx hold spec.numel() values of `dtype`; ga's buffers `channels`
            // (w, b may be null) and k 3 * channels values of the compute dtype; the `v`
            // kernel's steps are aligned.
            unsafe {
                dev.launch(
                    f,
                    (grid, 1, 1),
                    BLOCK,
                    0,
                    &mut args![px, pg, ga, pk, pdx, channels, inner_v, total_v, narrow],
                )?
            };
        }
    }
    Ok(Grads { dx, dweight, dbias })
}
