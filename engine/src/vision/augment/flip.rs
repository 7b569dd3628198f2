//! ultralytics' `RandomFlip`: mirror the image, and move each box centre with it.
//!
//! Boxes are flipped as ultralytics does, in `[cx, cy, w, h]` pixels: `cx = width - cx` (or
//! `cy = height - cy`), so the f32 results match its own.

use crate::vision::boxes::Box4;
use image::RgbImage;

/// Mirrors the image left to right.
pub fn flip_lr(img: &mut RgbImage) {
    let row_len = img.width() as usize * 3;
    if row_len == 0 {
        return;
    }
    for row in img.as_mut().chunks_exact_mut(row_len) {
        // The left half's pixels from the start, the right half's from the end (an odd middle
        // pixel is left unpaired, where it stays).
        let (left, right) = row.split_at_mut(row_len / 6 * 3);
        for (a, b) in left.chunks_exact_mut(3).zip(right.rchunks_exact_mut(3)) {
            a.swap_with_slice(b);
        }
    }
}

/// Mirrors the image top to bottom.
pub fn flip_ud(img: &mut RgbImage) {
    let row_len = img.width() as usize * 3;
    let rows = img.height() as usize;
    let data = img.as_mut();
    for i in 0..rows / 2 {
        let (top, bottom) = data.split_at_mut((rows - 1 - i) * row_len);
        top[i * row_len..(i + 1) * row_len].swap_with_slice(&mut bottom[..row_len]);
    }
}

/// Centre-size boxes of an image `width` wide, mirrored left to right.
pub fn flip_boxes_lr(boxes: &mut [Box4], width: f32) {
    for b in boxes {
        b[0] = width - b[0];
    }
}

/// Centre-size boxes of an image `height` high, mirrored top to bottom.
pub fn flip_boxes_ud(boxes: &mut [Box4], height: f32) {
    for b in boxes {
        b[1] = height - b[1];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;

    fn numbered(w: u32, h: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| Rgb([x as u8, y as u8, (x * 10 + y) as u8]))
    }

    #[test]
    fn flip_lr_mirrors_every_row() {
        // Odd and even widths (an odd one has a middle pixel that stays).
        for w in [5, 4, 1] {
            let mut img = numbered(w, 3);
            flip_lr(&mut img);
            for (x, y, px) in img.enumerate_pixels() {
                assert_eq!(*px, *numbered(w, 3).get_pixel(w - 1 - x, y), "width {w}");
            }
        }
    }

    #[test]
    fn flip_ud_mirrors_every_column() {
        let mut img = numbered(4, 5);
        flip_ud(&mut img);
        for (x, y, px) in img.enumerate_pixels() {
            assert_eq!(*px, *numbered(4, 5).get_pixel(x, 4 - y));
        }
    }

    #[test]
    fn flipped_boxes_cover_the_mirrored_pixels() {
        // A box over columns 1..3 of a 10-wide image covers 7..9 once mirrored.
        let mut boxes = [[2.0, 5.0, 2.0, 4.0]];
        flip_boxes_lr(&mut boxes, 10.0);
        assert_eq!(boxes, [[8.0, 5.0, 2.0, 4.0]]);
        flip_boxes_ud(&mut boxes, 8.0);
        assert_eq!(boxes, [[8.0, 3.0, 2.0, 4.0]]);
    }
}
