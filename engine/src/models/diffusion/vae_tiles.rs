//! The VAE's tiled decode (diffusers' `enable_tiling()`), so an image far larger than the VAE
//! was made for decodes with memory bounded by one tile: the latents are cut into tiles of the
//! VAE's `sample_size` (in image pixels) that overlap by a quarter, each tile is decoded alone,
//! and each decoded tile is blended linearly into the (already blended) tiles above and to its
//! left over the overlap before the overlaps are cut away.

use super::AutoencoderKl;
use crate::{Result, Tensor};

/// What fraction of a tile overlaps its neighbour (diffusers' `tile_overlap_factor`).
const OVERLAP: f64 = 0.25;

impl AutoencoderKl {
    /// Whether latents [N, C, h, w] are larger than one tile (a tiled decode differs from the
    /// whole one only then).
    pub fn needs_tiles(&self, latents: &Tensor) -> bool {
        let tile = self.latent_tile();
        latents.rank() == 4 && (latents.shape()[2] > tile || latents.shape()[3] > tile)
    }

    /// The latent side of one tile: the image tile (`sample_size`) over the downscale.
    fn latent_tile(&self) -> usize {
        (self.config.sample_size / self.config.downscale()).max(1)
    }

    /// Images from unscaled latents, decoded tile by tile (see the module's doc); latents no
    /// larger than a tile decode whole, as diffusers does.
    pub fn decode_tiled(&self, latents: &Tensor) -> Result<Tensor> {
        if !self.needs_tiles(latents) {
            return self.decode(latents);
        }
        let (h, w) = (latents.shape()[2], latents.shape()[3]);
        let tile = self.latent_tile();
        let sample_tile = self.config.sample_size;
        // diffusers truncates each of these to a whole number.
        let stride = ((tile as f64 * (1.0 - OVERLAP)) as usize).max(1);
        let blend = (sample_tile as f64 * OVERLAP) as usize;
        let keep = sample_tile - blend;
        let mut rows: Vec<Vec<Tensor>> = Vec::new();
        for i in (0..h).step_by(stride) {
            let mut row: Vec<Tensor> = Vec::new();
            for j in (0..w).step_by(stride) {
                let part = latents
                    .narrow(2, i, tile.min(h - i))?
                    .narrow(3, j, tile.min(w - j))?;
                let mut decoded = self.decode(&part)?;
                if let Some(above) = rows.last() {
                    decoded = fade_in(&above[row.len()], &decoded, blend, 2)?;
                }
                if let Some(left) = row.last() {
                    decoded = fade_in(left, &decoded, blend, 3)?;
                }
                row.push(decoded);
            }
            rows.push(row);
        }
        let cropped: Vec<Tensor> = rows
            .iter()
            .map(|row| {
                let parts: Vec<Tensor> =
                    row.iter().map(|t| crop(t, keep)).collect::<Result<_>>()?;
                Tensor::cat(&parts, 3)
            })
            .collect::<Result<_>>()?;
        Tensor::cat(&cropped, 2)
    }
}

/// `t`'s first `keep` rows and columns (all of a smaller edge tile).
fn crop(t: &Tensor, keep: usize) -> Result<Tensor> {
    let (h, w) = (t.shape()[2], t.shape()[3]);
    t.narrow(2, 0, keep.min(h))?.narrow(3, 0, keep.min(w))
}

/// `b` with its first `extent` rows (dim 2: `a` is the tile above) or columns (dim 3: the tile
/// to the left) faded in from `a`'s last ones: entry y of the overlap is
/// a · (1 − y/extent) + b · (y/extent).
fn fade_in(a: &Tensor, b: &Tensor, extent: usize, dim: usize) -> Result<Tensor> {
    let extent = extent.min(a.shape()[dim]).min(b.shape()[dim]);
    if extent == 0 {
        return Ok(b.clone());
    }
    let weights: Vec<f64> = (0..extent).map(|y| y as f64 / extent as f64).collect();
    let mut shape = vec![1; 4];
    shape[dim] = extent;
    let w = Tensor::from_f64s(&weights, &shape, b.dtype())?.to_device(b.device())?;
    let tail = a.narrow(dim as isize, a.shape()[dim] - extent, extent)?;
    let head = b.narrow(dim as isize, 0, extent)?;
    // a·(1 − w) + b·w, as diffusers computes it row by row.
    let faded = tail.mul(&w.neg()?.add_scalar(1.0)?)?.add(&head.mul(&w)?)?;
    let rest = b.narrow(dim as isize, extent, b.shape()[dim] - extent)?;
    Tensor::cat(&[faded, rest], dim as isize)
}
