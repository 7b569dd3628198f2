//! A contact sheet: images on a grid, each fitted into a square cell (aspect kept, centred on
//! white) under a caption tab, as a search or a dataset preview shows its results.

use super::draw::{draw_boxes_rgb, DrawBox};
use super::resize::resize_linear;
use super::RgbImage;
use crate::{Error, Result};

/// Room above each cell for its caption tab.
const CAPTION: u32 = 24;
const GAP: u32 = 6;

/// `images` on a grid of `cols` columns, each fitted into `cell` x `cell`, with `captions`
/// (one each, or none) in a tab above its cell.
pub fn contact_sheet(
    images: &[RgbImage],
    captions: &[String],
    cols: usize,
    cell: usize,
) -> Result<RgbImage> {
    if images.is_empty() || cols == 0 || !(8..=4096).contains(&cell) {
        return Err(Error::invalid(
            "contact_sheet",
            format!(
                "needs images, cols >= 1 and a cell of 8 to 4096 pixels; got {} images, cols {cols}, cell {cell}",
                images.len()
            ),
        ));
    }
    if !captions.is_empty() && captions.len() != images.len() {
        return Err(Error::invalid(
            "contact_sheet",
            format!("{} captions for {} images", captions.len(), images.len()),
        ));
    }
    let cols = cols.min(images.len());
    let rows = images.len().div_ceil(cols);
    let cell = cell as u32;
    let (step_x, step_y) = (cell + GAP, cell + CAPTION + GAP);
    let mut sheet = RgbImage::from_pixel(
        cols as u32 * step_x + GAP,
        rows as u32 * step_y + GAP,
        image::Rgb([255, 255, 255]),
    );
    let mut frames = Vec::new();
    for (i, img) in images.iter().enumerate() {
        let (x0, y0) = (
            GAP + (i % cols) as u32 * step_x,
            GAP + CAPTION + (i / cols) as u32 * step_y,
        );
        let (w, h) = (img.width().max(1), img.height().max(1));
        let scale = cell as f64 / w.max(h) as f64;
        let (fw, fh) = (
            ((w as f64 * scale).round() as u32).clamp(1, cell),
            ((h as f64 * scale).round() as u32).clamp(1, cell),
        );
        let fitted = resize_linear(img, fw as usize, fh as usize);
        let (ox, oy) = (x0 + (cell - fw) / 2, y0 + (cell - fh) / 2);
        image::imageops::replace(&mut sheet, &fitted, ox as i64, oy as i64);
        frames.push(DrawBox {
            xyxy: [x0 as f32, y0 as f32, (x0 + cell) as f32, (y0 + cell) as f32],
            label: captions.get(i).cloned().unwrap_or_default(),
            color: [60, 60, 60],
        });
    }
    draw_boxes_rgb(&mut sheet, &frames);
    Ok(sheet)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_sit_in_their_cells_fitted_and_centred() {
        let red = RgbImage::from_pixel(40, 20, image::Rgb([200, 0, 0]));
        let blue = RgbImage::from_pixel(10, 30, image::Rgb([0, 0, 200]));
        let sheet = contact_sheet(
            &[red, blue.clone(), blue],
            &["a".into(), "b".into(), "c".into()],
            2,
            32,
        )
        .unwrap();
        // Two columns, two rows.
        assert_eq!(
            sheet.dimensions(),
            (2 * (32 + GAP) + GAP, 2 * (32 + CAPTION + GAP) + GAP)
        );
        // The red image (40x20 → 32x16) centred in the first cell; white above and below it.
        let (x0, y0) = (GAP, GAP + CAPTION);
        assert_eq!(sheet.get_pixel(x0 + 16, y0 + 16).0, [200, 0, 0]);
        assert_eq!(sheet.get_pixel(x0 + 16, y0 + 4).0, [255, 255, 255]);
        // The blue one (10x30 → 11x32) in the second column's cell centre.
        assert_eq!(sheet.get_pixel(x0 + 32 + GAP + 16, y0 + 16).0, [0, 0, 200]);
        let err = contact_sheet(&[], &[], 2, 32).unwrap_err();
        assert!(err.to_string().contains("needs images"), "{err}");
    }
}
