//! conv2d through im2col + gemm, and its two backward products. Inputs are contiguous f32 or f64
//! (the op converts half types); batches run in parallel and weight gradients are summed in
//! batch order, so results do not depend on thread timing.

use super::matmul::mm;
use crate::spec::Conv2dGeometry;
use crate::WithDType;
use rayon::prelude::*;

/// im2col of one group of one image: [Cg*kh*kw, Ho*Wo].
fn im2col<T: WithDType>(x: &[T], g: &Conv2dGeometry) -> Vec<T> {
    let p = g.plane_out();
    let mut cols = vec![T::zero(); g.col_rows() * p];
    for ci in 0..g.cg() {
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                let row = ((ci * g.kh + ky) * g.kw + kx) * p;
                for oy in 0..g.ho {
                    for ox in 0..g.wo {
                        if let Some((y, xx)) = g.source(oy, ox, ky, kx) {
                            cols[row + oy * g.wo + ox] = x[(ci * g.h + y) * g.w + xx];
                        }
                    }
                }
            }
        }
    }
    cols
}

/// The adjoint of im2col: adds columns back into an image group [Cg, H, W].
fn col2im<T: WithDType>(cols: &[T], g: &Conv2dGeometry, dx: &mut [T]) {
    let p = g.plane_out();
    for ci in 0..g.cg() {
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                let row = ((ci * g.kh + ky) * g.kw + kx) * p;
                for oy in 0..g.ho {
                    for ox in 0..g.wo {
                        if let Some((y, xx)) = g.source(oy, ox, ky, kx) {
                            let d = &mut dx[(ci * g.h + y) * g.w + xx];
                            *d = T::from_f64(d.to_f64() + cols[row + oy * g.wo + ox].to_f64());
                        }
                    }
                }
            }
        }
    }
}

fn image_group<'a, T>(x: &'a [T], g: &Conv2dGeometry, n: usize, grp: usize) -> &'a [T] {
    let size = g.cg() * g.h * g.w;
    let start = (n * g.c + grp * g.cg()) * g.h * g.w;
    &x[start..start + size]
}

pub fn conv2d<T: WithDType>(x: &[T], w: &[T], g: &Conv2dGeometry) -> Vec<T> {
    let (og, p, kr) = (g.og(), g.plane_out(), g.col_rows());
    let mut out = vec![T::zero(); g.n * g.o * p];
    out.par_chunks_mut(g.o * p)
        .enumerate()
        .for_each(|(n, out_n)| {
            for grp in 0..g.groups {
                let cols = im2col(image_group(x, g, n, grp), g);
                let wg = &w[grp * og * kr..(grp + 1) * og * kr];
                let y = mm(wg, false, &cols, false, og, kr, p);
                out_n[grp * og * p..(grp + 1) * og * p].copy_from_slice(&y);
            }
        });
    out
}

/// dL/dx from dL/dy [N, O, Ho, Wo].
pub fn conv2d_input_grad<T: WithDType>(dy: &[T], w: &[T], g: &Conv2dGeometry) -> Vec<T> {
    let (og, p, kr) = (g.og(), g.plane_out(), g.col_rows());
    let mut dx = vec![T::zero(); g.n * g.c * g.h * g.w];
    dx.par_chunks_mut(g.c * g.h * g.w)
        .enumerate()
        .for_each(|(n, dx_n)| {
            for grp in 0..g.groups {
                let wg = &w[grp * og * kr..(grp + 1) * og * kr];
                let dyg = &dy[(n * g.o + grp * og) * p..(n * g.o + (grp + 1) * og) * p];
                let dcols = mm(wg, true, dyg, false, kr, og, p);
                let plane = g.cg() * g.h * g.w;
                col2im(&dcols, g, &mut dx_n[grp * plane..(grp + 1) * plane]);
            }
        });
    dx
}

/// dL/dw from dL/dy, summed over the batch in order.
pub fn conv2d_weight_grad<T: WithDType>(x: &[T], dy: &[T], g: &Conv2dGeometry) -> Vec<T> {
    let (og, p, kr) = (g.og(), g.plane_out(), g.col_rows());
    let per_image: Vec<Vec<T>> = (0..g.n)
        .into_par_iter()
        .map(|n| {
            let mut dw = Vec::with_capacity(g.o * kr);
            for grp in 0..g.groups {
                let cols = im2col(image_group(x, g, n, grp), g);
                let dyg = &dy[(n * g.o + grp * og) * p..(n * g.o + (grp + 1) * og) * p];
                dw.extend(mm(dyg, false, &cols, true, og, p, kr));
            }
            dw
        })
        .collect();
    let mut dw = vec![T::zero(); g.o * kr];
    for img in per_image {
        dw.iter_mut()
            .zip(img)
            .for_each(|(a, b)| *a = T::from_f64(a.to_f64() + b.to_f64()));
    }
    dw
}
