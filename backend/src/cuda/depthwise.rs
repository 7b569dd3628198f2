//! Depthwise 3×3 convolutions (groups == channels == outputs) on our own kernels
//! (kernels/depthwise.cu), NCHW or NHWC, all three passes. cuDNN's engines for these shapes ran
//! 10-25× slower than PyTorch's own depthwise kernels on the H200 (0.71 ms against 0.027 ms
//! forward for 64 channels at 80×80, batch 32), and they are bandwidth-bound, so a direct
//! gather that reads each tap from cache is the right tool. Other filter sizes go to cuDNN.

use super::compile::DEPTHWISE;
use super::cudnn::{Format, Pass, PlanSummary};
use super::launch::{args, grid_for, type_suffix};
use super::CudaStorage;
use crate::spec::Conv2dGeometry;
use crate::{DType, Result};
use std::sync::Mutex;

const BLOCK: u32 = 256;

/// Mirrors `struct DwGeom` in kernels/depthwise.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct DwGeom {
    n: i32,
    c: i32,
    h: i32,
    w: i32,
    ho: i32,
    wo: i32,
    sh: i32,
    sw: i32,
    ph: i32,
    pw: i32,
    dh: i32,
    dw: i32,
}

/// Whether these kernels take the convolution: one 3×3 filter per channel, every tensor below
/// 2^31 elements (the kernels index in 32 bits) and the batch within a grid dimension.
pub fn takes(g: &Conv2dGeometry) -> bool {
    let fits = |v: usize| v < i32::MAX as usize;
    g.groups == g.c
        && g.o == g.c
        && (g.kh, g.kw) == (3, 3)
        && fits(g.n * g.c * g.h * g.w)
        && fits(g.n * g.c * g.ho * g.wo)
        && g.n <= u16::MAX as usize
        && [
            g.stride.0,
            g.stride.1,
            g.padding.0,
            g.padding.1,
            g.dilation.0,
            g.dilation.1,
        ]
        .into_iter()
        .all(fits)
}

/// Every (pass, dtype, layout, shape) run here so far, for `conv::plans`.
static RAN: Mutex<Vec<PlanSummary>> = Mutex::new(Vec::new());

/// What these kernels ran, as cuDNN reports its plans (algorithm "depthwise kernel").
pub fn plans() -> Vec<PlanSummary> {
    RAN.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn record(pass: Pass, dtype: DType, format: Format, g: &Conv2dGeometry) {
    let mut ran = RAN.lock().unwrap_or_else(|e| e.into_inner());
    let seen = |p: &PlanSummary| {
        p.pass == pass && p.dtype == dtype && p.format == format && p.geometry == *g
    };
    if !ran.iter().any(seen) {
        ran.push(PlanSummary {
            pass,
            dtype,
            format,
            geometry: *g,
            algorithm: "depthwise kernel".into(),
            workspace: 0,
        });
    }
}

fn geom(g: &Conv2dGeometry) -> DwGeom {
    let i = |v: usize| v as i32;
    DwGeom {
        n: i(g.n),
        c: i(g.c),
        h: i(g.h),
        w: i(g.w),
        ho: i(g.ho),
        wo: i(g.wo),
        sh: i(g.stride.0),
        sw: i(g.stride.1),
        ph: i(g.padding.0),
        pw: i(g.padding.1),
        dh: i(g.dilation.0),
        dw: i(g.dilation.1),
    }
}

/// Outputs a thread computes in a row on the stride-1 kernels (`DW_STRIP` in the .cu file).
const STRIP: usize = 8;

/// Whether the stride-1 strip kernels take the shape: stride 1, no dilation, and padding within
/// the filter, so that the input gradient is the mirrored filter's forward pass.
fn strips(g: &Conv2dGeometry) -> bool {
    g.stride == (1, 1) && g.dilation == (1, 1) && g.padding.0 <= 2 && g.padding.1 <= 2
}

fn layout_name(format: Format) -> &'static str {
    match format {
        Format::Nchw => "nchw",
        Format::Nhwc => "nhwc",
    }
}

/// One pass, with the operands cuDNN's `run` takes: (x, w) forward, (dy, w) for the input
/// gradient, (x, dy) for the weight gradient; each contiguous in `format` from its offset.
/// Returns y or dx in `format`, or dw [C, 1, 3, 3].
pub fn run(
    pass: Pass,
    format: Format,
    (a, a_offset): (&CudaStorage, usize),
    (b, b_offset): (&CudaStorage, usize),
    g: &Conv2dGeometry,
) -> Result<CudaStorage> {
    let dev = a.cuda_device();
    let dtype = a.dtype();
    record(pass, dtype, format, g);
    let (pa, pb) = (a.ptr_at(a_offset), b.ptr_at(b_offset));
    let dg = geom(g);
    let suffix = format!("{}_3x3_{}", layout_name(format), type_suffix(dtype));
    let (kernel, total) = match (pass, strips(g)) {
        (Pass::Forward, false) => ("dw_fwd", g.n * g.c * g.ho * g.wo),
        (Pass::Forward, true) => ("dw_fwd1", g.n * g.c * g.ho * g.wo.div_ceil(STRIP)),
        (Pass::InputGrad, false) => ("dw_dgrad", g.n * g.c * g.h * g.w),
        (Pass::InputGrad, true) => ("dw_dgrad1", g.n * g.c * g.h * g.w.div_ceil(STRIP)),
        (Pass::WeightGrad, _) => return weight_grad(format, pa, pb, dtype, dev, g),
    };
    let len = match pass {
        Pass::Forward => g.n * g.c * g.ho * g.wo,
        _ => g.n * g.c * g.h * g.w,
    };
    let out = CudaStorage::alloc(dev, len, dtype)?;
    if total == 0 {
        return Ok(out);
    }
    let f = dev.function(&DEPTHWISE, &format!("{kernel}_{suffix}"))?;
    let grid = grid_for(total, BLOCK, dev.sm_count());
    let y = out.ptr();
    // SAFETY: a and b hold the pass's operands contiguously from their offsets (the caller's
    // shapes), and `out` holds the result's `len` elements; `total` counts threads' items.
    unsafe { dev.launch(f, (grid, 1, 1), BLOCK, 0, &mut args![pa, pb, y, dg])? };
    Ok(out)
}

/// dw in two kernels: per-block partial sums over fixed runs of pixels (one image per block
/// NCHW; `per` pixels, or strips of them, NHWC), in the accumulation type, then their sum in
/// order.
fn weight_grad(
    format: Format,
    x: u64,
    dy: u64,
    dtype: DType,
    dev: &std::sync::Arc<super::CudaDevice>,
    g: &Conv2dGeometry,
) -> Result<CudaStorage> {
    let taps = g.c * 9;
    let out = CudaStorage::alloc(dev, taps, dtype)?;
    if taps == 0 {
        return Ok(out);
    }
    let acc = dtype.compute_dtype();
    let strip = strips(g);
    // What the NHWC blocks divide among themselves: output pixels, or strips of them.
    let pixels = if strip {
        g.n * g.ho * g.wo.div_ceil(STRIP)
    } else {
        g.n * g.ho * g.wo
    };
    let (grid, per) = match format {
        Format::Nchw => ((g.c as u32, g.n as u32, 1), 0),
        Format::Nhwc => {
            // About eight blocks per SM in all, each with at least 256 items.
            let tiles = g.c.div_ceil(32);
            let want = (dev.sm_count() as usize * 8).div_ceil(tiles);
            let per = pixels.div_ceil(want.max(1)).max(256);
            let chunks = pixels.div_ceil(per).clamp(1, u16::MAX as usize);
            let per = pixels.div_ceil(chunks).max(1);
            ((tiles as u32, chunks as u32, 1), per)
        }
    };
    let chunks = grid.1 as usize;
    let parts = CudaStorage::alloc(dev, chunks * taps, acc)?;
    let name = format!(
        "dw_wgrad{}_{}_3x3_{}",
        if strip { "1" } else { "" },
        layout_name(format),
        type_suffix(dtype)
    );
    let f = dev.function(&DEPTHWISE, &name)?;
    let (p, per) = (parts.ptr(), per as i32);
    let dg = geom(g);
    // SAFETY: x and dy hold the images and output gradients contiguously; `parts` holds one
    // partial per (chunk, channel, tap), as the grid covers.
    unsafe { dev.launch(f, grid, BLOCK, 0, &mut args![x, dy, p, dg, per])? };
    let sum = dev.function(&DEPTHWISE, &format!("dw_wgrad_sum_{}", type_suffix(dtype)))?;
    let (dw, chunks, ck) = (out.ptr(), chunks as i32, taps as i32);
    let grid = grid_for(taps, BLOCK, dev.sm_count());
    // SAFETY: `parts` holds chunks × ck partials and `out` ck elements.
    unsafe { dev.launch(sum, (grid, 1, 1), BLOCK, 0, &mut args![p, dw, chunks, ck])? };
    Ok(out)
}
