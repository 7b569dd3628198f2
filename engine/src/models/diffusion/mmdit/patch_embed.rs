//! diffusers' `PatchEmbed` as SD3 uses it: a p×p, stride-p conv from the latent to tokens, plus
//! a fixed 2-D sin-cos position table over a `pos_embed_max_size` square grid, cropped about
//! its centre to the image's patches (saved with the weights as `pos_embed.pos_embed`).

use crate::nn::{Conv2d, Module};
use crate::{DType, Error, Generator, Result, Tensor};

/// The position table [grid², dim] of a grid × grid square (row-major): for the patch in row
/// i and column j, the 1-D sin-cos embedding of the column's coordinate in the first half and
/// of the row's in the second (diffusers' `get_2d_sincos_pos_embed`, whose meshgrid puts the
/// width axis first), each coordinate being index / (grid / base_size) / interpolation_scale.
/// Computed in f64 and rounded to F32, as diffusers does.
pub fn sincos_position_table(
    dim: usize,
    grid: usize,
    base_size: f64,
    interpolation_scale: f64,
) -> Result<Tensor> {
    if !dim.is_multiple_of(4) {
        return Err(Error::invalid(
            "PatchEmbed",
            format!("a 2-D sin-cos table needs a width divisible by 4, got {dim}"),
        ));
    }
    let quarter = dim / 4;
    let omega: Vec<f64> = (0..quarter)
        .map(|k| 1.0 / 10000f64.powf(k as f64 / quarter as f64))
        .collect();
    let coord = |i: usize| i as f64 / (grid as f64 / base_size) / interpolation_scale;
    let mut table = Vec::with_capacity(grid * grid * dim);
    for i in 0..grid {
        for j in 0..grid {
            for pos in [coord(j), coord(i)] {
                table.extend(omega.iter().map(|w| (pos * w).sin()));
                table.extend(omega.iter().map(|w| (pos * w).cos()));
            }
        }
    }
    Tensor::from_f64s(&table, &[grid * grid, dim], DType::F32)
}

pub struct PatchEmbed {
    pub patch_size: usize,
    /// The table's side in patches.
    pub max_size: usize,
    proj: Conv2d,
    /// [1, max_size², dim].
    pos_embed: Tensor,
    training: bool,
}

impl PatchEmbed {
    pub fn new(
        in_channels: usize,
        dim: usize,
        patch_size: usize,
        max_size: usize,
        base_size: usize,
        gen: &mut Generator,
    ) -> Result<PatchEmbed> {
        let table = sincos_position_table(dim, max_size, base_size as f64, 1.0)?;
        Ok(PatchEmbed {
            patch_size,
            max_size,
            proj: super::super::blocks::conv(in_channels, dim, patch_size, patch_size, 0, gen)?,
            pos_embed: table.unsqueeze(0)?,
            training: true,
        })
    }

    /// The table's rows for an h × w patch grid, centred: [1, h·w, dim].
    fn cropped(&self, h: usize, w: usize) -> Result<Tensor> {
        let m = self.max_size;
        if h > m || w > m {
            return Err(Error::invalid(
                "SD3Transformer2DModel",
                format!(
                    "{h}x{w} patches exceed pos_embed_max_size {m}: the image is larger than the model's position table (at most {0}x{0} pixels of latent)",
                    m * self.patch_size
                ),
            ));
        }
        let dim = self.pos_embed.shape()[2];
        let (top, left) = ((m - h) / 2, (m - w) / 2);
        self.pos_embed
            .reshape_to(&[m, m, dim])?
            .narrow(0, top, h)?
            .narrow(1, left, w)?
            .reshape_to(&[1, h * w, dim])
    }
}

impl Module for PatchEmbed {
    /// Latents [B, C, H, W] → tokens [B, (H/p)·(W/p), dim] with their positions added.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let p = self.patch_size;
        let &[b, _, h, w] = x.shape() else {
            return Err(Error::layer_input(
                "PatchEmbed",
                "latents [B, C, H, W]",
                format!("{:?}", x.shape()),
            ));
        };
        if !h.is_multiple_of(p) || !w.is_multiple_of(p) {
            return Err(Error::invalid(
                "SD3Transformer2DModel",
                format!("latents {h}x{w} do not split into {p}x{p} patches"),
            ));
        }
        let tokens = self.proj.forward(x)?;
        let dim = tokens.shape()[1];
        let (h, w) = (h / p, w / p);
        let tokens = tokens.reshape_to(&[b, dim, h * w])?.permute(&[0, 2, 1])?;
        let pos = self.cropped(h, w)?.to_dtype(tokens.dtype())?;
        tokens.add(&pos)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("proj".into(), &self.proj)]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.proj]
    }

    fn own_buffers(&self) -> Vec<(String, Tensor)> {
        vec![("pos_embed".into(), self.pos_embed.clone())]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "PatchEmbed".into()
    }
}
