//! What a warp reads: a plain image, or a picture put together on the fly (a mosaic's canvas,
//! which the warp reads only a part of, so it is never built whole on the fast path).

use image::RgbImage;
use std::borrow::Cow;

/// An 8-bit RGB source image for [`super::warp::warp_affine_from`].
pub trait WarpSource {
    /// (width, height) in pixels.
    fn size(&self) -> (usize, usize);

    /// Pixels `x0..x1` of row `y` (`x0 <= x1 <= width`, `y < height`) into `out`, which holds
    /// `(x1 - x0) * 3` bytes.
    fn read_row(&self, y: usize, x0: usize, x1: usize, out: &mut [u8]);

    /// The whole image, for warps that read it in any order.
    fn to_image(&self) -> Cow<'_, RgbImage>;
}

impl WarpSource for RgbImage {
    fn size(&self) -> (usize, usize) {
        (self.width() as usize, self.height() as usize)
    }

    fn read_row(&self, y: usize, x0: usize, x1: usize, out: &mut [u8]) {
        let start = (y * self.width() as usize + x0) * 3;
        out.copy_from_slice(&self.as_raw()[start..start + (x1 - x0) * 3]);
    }

    fn to_image(&self) -> Cow<'_, RgbImage> {
        Cow::Borrowed(self)
    }
}
