//! im2col and its adjoint col2im (kernels/conv.cu): the data movement of conv2d, whose
//! products the op runs through cuBLAS. Both work on a chunk of `images` images.

use super::compile::CONV;
use super::copy::cast;
use super::launch::{args, grid_for, type_suffix};
use super::CudaStorage;
use crate::backend::cpu::conv::Conv2dGeometry;
use crate::{Layout, Result};

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
