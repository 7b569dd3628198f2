//! conv2d and its two backward products. The fast paths come first (`run_pass`: our depthwise
//! kernels, then cuDNN); without them, im2col (kernels/conv.cu) and cuBLAS: per
//! chunk of images, the columns [groups, Cg*kh*kw, images*Ho*Wo] meet the weight
//! [groups, O/groups, Cg*kh*kw] in one product batched over groups; col2im, the adjoint of
//! im2col, sums column gradients back into pixels.

use super::compile::CONV;
use super::copy::{cast, copy_view};
use super::cudnn::{self, Format, Pass};
use super::depthwise;
use super::elementwise::binary;
use super::launch::{args, grid_for, type_suffix};
use super::matmul::{matmul, matmul_into_dtype};
use super::CudaStorage;
use crate::spec::{BinaryOp, Conv2dGeometry};
use crate::{DType, Layout, Result};

const BLOCK: u32 = 256;

/// Mirrors `struct ConvGeom` in kernels/conv.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct ConvGeom {
    n: i64,
    c: i64,
    h: i64,
    w: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    ph: i64,
    pw: i64,
    dh: i64,
    dw: i64,
    ho: i64,
    wo: i64,
}

fn geom(g: &Conv2dGeometry, images: usize) -> ConvGeom {
    let i = |v: usize| v as i64;
    ConvGeom {
        n: i(images),
        c: i(g.c),
        h: i(g.h),
        w: i(g.w),
        kh: i(g.kh),
        kw: i(g.kw),
        sh: i(g.stride.0),
        sw: i(g.stride.1),
        ph: i(g.padding.0),
        pw: i(g.padding.1),
        dh: i(g.dilation.0),
        dw: i(g.dilation.1),
        ho: i(g.ho),
        wo: i(g.wo),
    }
}

/// Runs `kernel` from `src` (packed first when its view is not contiguous) into a fresh
/// buffer of `total` elements.
fn run(
    kernel: &str,
    src: &CudaStorage,
    l: &Layout,
    g: ConvGeom,
    total: usize,
) -> Result<CudaStorage> {
    let dev = src.cuda_device();
    let out = CudaStorage::alloc(dev, total, src.dtype())?;
    if total == 0 {
        return Ok(out);
    }
    let packed;
    let (s, offset) = if l.is_contiguous() {
        (src, l.offset())
    } else {
        packed = cast(src, l, src.dtype())?;
        (&packed, 0)
    };
    let f = dev.function(&CONV, &format!("{kernel}_{}", type_suffix(src.dtype())))?;
    let (x, y, n) = (s.ptr_at(offset), out.ptr(), total as i64);
    let grid = grid_for(total, BLOCK, dev.sm_count());
    // SAFETY: the caller's view holds the kernel's whole input (checked by the op's shapes),
    // and y holds `total` elements.
    unsafe { dev.launch(f, (grid, 1, 1), BLOCK, 0, &mut args![x, y, g, n])? };
    Ok(out)
}

/// Columns [C*kh*kw, images*Ho*Wo] of the images [images, C, H, W] seen through `l`.
pub fn im2col(
    x: &CudaStorage,
    l: &Layout,
    g: &Conv2dGeometry,
    images: usize,
) -> Result<CudaStorage> {
    let total = g.c * g.kh * g.kw * images * g.ho * g.wo;
    run("im2col", x, l, geom(g, images), total)
}

/// Images [images, C, H, W] from columns [C*kh*kw, images*Ho*Wo] seen through `l`, each pixel
/// the sum of the columns that read it.
pub fn col2im(
    cols: &CudaStorage,
    l: &Layout,
    g: &Conv2dGeometry,
    images: usize,
) -> Result<CudaStorage> {
    let total = images * g.c * g.h * g.w;
    run("col2im", cols, l, geom(g, images), total)
}

/// Columns are built for at most this many elements at a time (512 MiB of F32); a larger
/// batch runs in chunks of whole images.
const COLS_BUDGET: usize = 1 << 27;

/// (first image, images) of each chunk.
fn image_chunks(g: &Conv2dGeometry) -> Vec<(usize, usize)> {
    let per_image = (g.c * g.kh * g.kw * g.ho * g.wo).max(1);
    let step = (COLS_BUDGET / per_image).clamp(1, g.n.max(1));
    (0..g.n)
        .step_by(step)
        .map(|s| (s, step.min(g.n - s)))
        .collect()
}

/// The weight [O, Cg, kh, kw] (contiguous) seen as [groups, O/groups, Cg*kh*kw].
fn grouped_weight(w: &Layout, g: &Conv2dGeometry) -> Layout {
    let (og, kr) = (g.og(), g.col_rows());
    Layout::new(vec![g.groups, og, kr], vec![og * kr, kr, 1], w.offset())
}

/// A contiguous copy of the view unless it already is one.
fn packed<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    keep: &'a mut Option<CudaStorage>,
) -> Result<(&'a CudaStorage, Layout)> {
    if l.is_contiguous() {
        return Ok((s, l.clone()));
    }
    let copy = keep.insert(cast(s, l, s.dtype())?);
    Ok((copy, Layout::contiguous(l.shape())))
}

/// Images n0..n0+nc of the gradient dy [N, O, P] as [O, nc, P], which is
/// [groups, O/groups, nc*P]: a contiguous copy laid out to line up with the columns.
fn grouped_grad(dy: &CudaStorage, l: &Layout, n0: usize, nc: usize) -> Result<CudaStorage> {
    cast(dy, &l.narrowed(0, n0, nc).permuted(&[1, 0, 2]), dy.dtype())
}

/// One pass on the fast path for its shape: our depthwise kernels for 3×3 depthwise
/// convolutions, cuDNN for the rest. Operands and result as `cudnn::run` takes and gives them.
pub fn run_pass(
    pass: Pass,
    format: Format,
    a: (&CudaStorage, usize),
    b: (&CudaStorage, usize),
    g: &Conv2dGeometry,
) -> Result<CudaStorage> {
    if depthwise::takes(g) {
        depthwise::run(pass, format, a, b, g)
    } else {
        cudnn::run(pass, format, a, b, g)
    }
}

/// What the fast paths ran so far in this process: cuDNN's plans and the depthwise kernels'
/// shapes, for benchmarks and reports.
pub fn plans() -> Vec<cudnn::PlanSummary> {
    let mut all = cudnn::plans();
    all.extend(depthwise::plans());
    all
}

/// The pass on its fast path (`run_pass`) when there is one; `None` means: use im2col. An
/// error there is reported once per process and the call falls back.
fn through_fast_path(
    pass: Pass,
    format: Format,
    (a, la): (&CudaStorage, &Layout),
    (b, lb): (&CudaStorage, &Layout),
    g: &Conv2dGeometry,
) -> Option<CudaStorage> {
    if !depthwise::takes(g) && !cudnn::enabled() {
        return None;
    }
    match run_pass(pass, format, (a, la.offset()), (b, lb.offset()), g) {
        Ok(out) => Some(out),
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!(
                    "note: a fast convolution path failed ({e}); this convolution uses im2col"
                )
            });
            None
        }
    }
}

/// y [N, O, Ho, Wo] = conv2d(x [N, C, H, W], w [O, C/groups, kh, kw]); x and w of one dtype.
pub fn conv2d(
    x: &CudaStorage,
    lx: &Layout,
    w: &CudaStorage,
    lw: &Layout,
    g: &Conv2dGeometry,
) -> Result<CudaStorage> {
    let (mut kx, mut kw) = (None, None);
    let ((x, lx), (w, lw)) = (packed(x, lx, &mut kx)?, packed(w, lw, &mut kw)?);
    if let Some(y) = through_fast_path(Pass::Forward, Format::Nchw, (x, &lx), (w, &lw), g) {
        return Ok(y);
    }
    let p = g.plane_out();
    let y = CudaStorage::alloc(x.cuda_device(), g.n * g.o * p, x.dtype())?;
    let ly = Layout::contiguous(&[g.n, g.o, p]);
    let wg = grouped_weight(&lw, g);
    for (n0, nc) in image_chunks(g) {
        let cols = im2col(x, &lx.narrowed(0, n0, nc), g, nc)?;
        let lcols = Layout::contiguous(&[g.groups, g.col_rows(), nc * p]);
        // [groups, og, nc*P] is [O, nc, P]: written into images n0.. of y, channel-major.
        let part = matmul(w, &wg, &cols, &lcols)?;
        let dst = ly.narrowed(0, n0, nc).permuted(&[1, 0, 2]);
        copy_view(&part, &Layout::contiguous(&[g.o, nc, p]), &y, &dst)?;
    }
    Ok(y)
}

/// Whether inference convolutions in a half type run channels-last: opted into with
/// `RB_CHANNELS_LAST=1`, and only with cuDNN (its NHWC tensor-core kernels are the point).
/// Off by default until upsample, max pool and channel splits keep the layout too: today they
/// fall back to NCHW copies, which cost more than the convolutions gain (docs/baseline.md).
pub fn channels_last_preferred() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("RB_CHANNELS_LAST").as_deref() == Ok("1")) && cudnn::enabled()
}

/// y = conv2d(x, w) channels-last: x [N, C, H, W] laid out NHWC (`Layout::is_channels_last`),
/// w contiguous [O, kh, kw, C/groups]; y is NHWC too (storage [N, Ho, Wo, O]). Without cuDNN,
/// or when it refuses the call, the NCHW path runs between transposes.
pub fn conv2d_channels_last(
    x: &CudaStorage,
    lx: &Layout,
    w: &CudaStorage,
    lw: &Layout,
    g: &Conv2dGeometry,
) -> Result<CudaStorage> {
    let krsc = [g.o, g.kh, g.kw, g.cg()];
    if !lx.is_channels_last() || !lw.is_contiguous() || lw.shape() != krsc {
        return Err(crate::Error::invalid(
            "conv2d",
            format!(
                "channels-last takes NHWC images and [O, kh, kw, C/groups] weights {krsc:?}; got {lx:?} and {:?}",
                lw.shape()
            ),
        ));
    }
    if let Some(y) = through_fast_path(Pass::Forward, Format::Nhwc, (x, lx), (w, lw), g) {
        return Ok(y);
    }
    let dtype = x.dtype();
    let x_nchw = cast(x, lx, dtype)?;
    let w_oihw = cast(w, &lw.permuted(&[0, 3, 1, 2]), dtype)?;
    let (lxn, lwn) = (
        Layout::contiguous(&[g.n, g.c, g.h, g.w]),
        Layout::contiguous(&[g.o, g.cg(), g.kh, g.kw]),
    );
    let y = conv2d(&x_nchw, &lxn, &w_oihw, &lwn, g)?;
    cast(
        &y,
        &Layout::contiguous(&[g.n, g.o, g.ho, g.wo]).permuted(&[0, 2, 3, 1]),
        dtype,
    )
}

/// dL/dx [N, C, H, W] from dy [N, O, Ho, Wo] and w: weight^T times the grouped gradient gives
/// column gradients, which col2im sums back into pixels.
pub fn conv2d_input_grad(
    dy: &CudaStorage,
    ldy: &Layout,
    w: &CudaStorage,
    lw: &Layout,
    g: &Conv2dGeometry,
) -> Result<CudaStorage> {
    let (mut kd, mut kw) = (None, None);
    let ((dy, ldy), (w, lw)) = (packed(dy, ldy, &mut kd)?, packed(w, lw, &mut kw)?);
    if let Some(dx) = through_fast_path(Pass::InputGrad, Format::Nchw, (dy, &ldy), (w, &lw), g) {
        return Ok(dx);
    }
    let p = g.plane_out();
    let ldy = Layout::new(vec![g.n, g.o, p], vec![g.o * p, p, 1], ldy.offset());
    let dx = CudaStorage::alloc(dy.cuda_device(), g.n * g.c * g.h * g.w, dy.dtype())?;
    let ldx = Layout::contiguous(&[g.n, g.c * g.h * g.w]);
    let wt = grouped_weight(&lw, g).permuted(&[0, 2, 1]);
    for (n0, nc) in image_chunks(g) {
        let gdy = grouped_grad(dy, &ldy, n0, nc)?;
        let lgdy = Layout::contiguous(&[g.groups, g.og(), nc * p]);
        let col_grad = matmul(w, &wt, &gdy, &lgdy)?;
        let lcols = Layout::contiguous(&[g.groups, g.col_rows(), nc * p]);
        let images = col2im(&col_grad, &lcols, g, nc)?;
        let src = Layout::contiguous(&[nc, g.c * g.h * g.w]);
        copy_view(&images, &src, &dx, &ldx.narrowed(0, n0, nc))?;
    }
    Ok(dx)
}

/// dL/dw [O, C/groups, kh, kw] from x and dy: the grouped gradient times columns^T, summed over
/// chunks (in F32 for the half types when there are several, so they do not round per chunk).
pub fn conv2d_weight_grad(
    x: &CudaStorage,
    lx: &Layout,
    dy: &CudaStorage,
    ldy: &Layout,
    g: &Conv2dGeometry,
) -> Result<CudaStorage> {
    let (mut kx, mut kd) = (None, None);
    let ((x, lx), (dy, ldy)) = (packed(x, lx, &mut kx)?, packed(dy, ldy, &mut kd)?);
    if let Some(dw) = through_fast_path(Pass::WeightGrad, Format::Nchw, (x, &lx), (dy, &ldy), g) {
        return Ok(dw);
    }
    let p = g.plane_out();
    let ldy = Layout::new(vec![g.n, g.o, p], vec![g.o * p, p, 1], ldy.offset());
    let chunks = image_chunks(g);
    let dtype = dy.dtype();
    let sum_dtype = match dtype {
        DType::BF16 | DType::F16 if chunks.len() > 1 => DType::F32,
        _ => dtype,
    };
    let lw = Layout::contiguous(&[g.groups, g.og(), g.col_rows()]);
    let mut total: Option<CudaStorage> = None;
    for (n0, nc) in chunks {
        let cols = im2col(x, &lx.narrowed(0, n0, nc), g, nc)?;
        let lcols_t = Layout::contiguous(&[g.groups, g.col_rows(), nc * p]).permuted(&[0, 2, 1]);
        let gdy = grouped_grad(dy, &ldy, n0, nc)?;
        let lgdy = Layout::contiguous(&[g.groups, g.og(), nc * p]);
        let part = matmul_into_dtype(&gdy, &lgdy, &cols, &lcols_t, sum_dtype)?;
        total = Some(match total {
            None => part,
            Some(t) => binary(&t, &lw, &part, &lw, BinaryOp::Add)?,
        });
    }
    match total {
        Some(t) if t.dtype() != dtype => cast(&t, &lw, dtype),
        Some(t) => Ok(t),
        None => {
            let zeros = CudaStorage::alloc(dy.cuda_device(), lw.numel(), dtype)?;
            super::copy::fill(&zeros, &lw, 0.0)?;
            Ok(zeros)
        }
    }
}
