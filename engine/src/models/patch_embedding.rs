//! What the patch-based image encoders (ViT, DeiT, DINOv2, CLIP's and SigLIP's vision towers)
//! share in front of their blocks: the strided conv that cuts images into patch tokens, the
//! leading tokens ([CLS], DeiT's distillation token) and the learned position table,
//! resampled when the image's grid differs from the checkpoint's.

use crate::nn::{Conv2d, Module};
use crate::{Conv2dOptions, Error, Generator, Result, Tensor};

/// How a position table is resampled to another grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resample {
    /// torch's bicubic (`align_corners=False`), as transformers' `interpolate_pos_encoding`.
    Bicubic,
    /// torch's antialiased bicubic, as transformers' DINOv2 with registers.
    BicubicAntialias,
}

/// Images [B, C, H, W] → `leading` tokens (each [1, 1, D], or [D]) then the patch tokens, plus
/// `table` [1, leading + patches, D] resampled to the image's grid: [B, leading + patches, D]
/// in the patch tokens' dtype.
pub fn embed_patches(
    conv: &Conv2d,
    images: &Tensor,
    leading: &[&Tensor],
    table: &Tensor,
    resample: Resample,
) -> Result<Tensor> {
    let (tokens, (h, w)) = patch_tokens(conv, images)?;
    let (b, d, dtype) = (tokens.shape()[0], tokens.shape()[2], tokens.dtype());
    let mut rows = leading
        .iter()
        .map(|t| {
            t.reshape(&[1, 1, d as isize])?
                .expand(&[b, 1, d])?
                .to_dtype(dtype)
        })
        .collect::<Result<Vec<_>>>()?;
    let table = match resample {
        Resample::Bicubic => resample_positions(table, rows.len(), h, w)?,
        Resample::BicubicAntialias => resample_positions_antialias(table, rows.len(), h, w)?,
    };
    let x = match rows.is_empty() {
        true => tokens,
        false => {
            rows.push(tokens);
            Tensor::cat(&rows, 1)?
        }
    };
    x.add(&table.to_dtype(dtype)?)
}

/// A strided conv that cuts an image into `patch` x `patch` patches of `width` features.
pub fn patch_conv(
    channels: usize,
    width: usize,
    patch: usize,
    bias: bool,
    gen: &mut Generator,
) -> Result<Conv2d> {
    let options = Conv2dOptions {
        stride: (patch, patch),
        padding: (0, 0),
        dilation: (1, 1),
        groups: 1,
    };
    Conv2d::new(channels, width, (patch, patch), options, bias, gen)
}

/// Images [B, C, H, W] through a patch conv, as tokens [B, patches, D] and the grid (h, w).
pub fn patch_tokens(conv: &Conv2d, images: &Tensor) -> Result<(Tensor, (usize, usize))> {
    let patches = conv.forward(images)?;
    let [b, d, h, w] = patches.shape()[..] else {
        unreachable!("a conv gives rank 4")
    };
    // A patch conv's output is channels-last memory (`conv2d` runs it as one product), so the
    // tokens are a view of it.
    let tokens = patches.permute(&[0, 2, 3, 1])?.reshape_to(&[b, h * w, d])?;
    Ok((tokens, (h, w)))
}

/// A learned position table over a square grid of patches (after `extra` rows for class and
/// distillation tokens), for an image of `h` x `w` patches: the table itself when the grid is
/// already `h` x `w`, else its patch rows resampled bicubically (torch's `interpolate`,
/// `align_corners=False`, as transformers' `interpolate_pos_encoding`) and the extra rows
/// unchanged. `table` is [1, extra + n, D].
pub fn resample_positions(table: &Tensor, extra: usize, h: usize, w: usize) -> Result<Tensor> {
    resample_grid(table, extra, h, w, |g| g.interpolate_bicubic((h, w), false))
}

/// [`resample_positions`] with torch's antialiased bicubic (`antialias=True`), as
/// transformers' DINOv2 with registers resamples.
pub fn resample_positions_antialias(
    table: &Tensor,
    extra: usize,
    h: usize,
    w: usize,
) -> Result<Tensor> {
    resample_grid(table, extra, h, w, |g| {
        g.interpolate_bicubic_antialias((h, w))
    })
}

fn resample_grid(
    table: &Tensor,
    extra: usize,
    h: usize,
    w: usize,
    resample: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let (n, d) = (table.shape()[1] - extra, table.shape()[2]);
    if n == h * w && h == w {
        return Ok(table.clone());
    }
    let side = (n as f64).sqrt().round() as usize;
    if side * side != n {
        return Err(Error::invalid(
            "position table",
            format!("a table of {n} patches is not a square grid to resample"),
        ));
    }
    let grid = table
        .narrow(1, extra, n)?
        .reshape(&[1, side as isize, side as isize, d as isize])?
        .permute(&[0, 3, 1, 2])?;
    let grid =
        resample(&grid)?
            .permute(&[0, 2, 3, 1])?
            .reshape(&[1, (h * w) as isize, d as isize])?;
    match extra {
        0 => Ok(grid),
        _ => Tensor::cat(&[table.narrow(1, 0, extra)?, grid], 1),
    }
}

/// A parameter drawn from N(0, 0.02²), transformers' `initializer_range`.
pub fn param(shape: &[usize], gen: &mut Generator) -> Result<Tensor> {
    let t = Tensor::randn(shape, crate::DType::F32, Some(gen))?.mul_scalar(0.02)?;
    t.requires_grad_()
}
