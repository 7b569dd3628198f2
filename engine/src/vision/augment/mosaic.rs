//! ultralytics' 4-image `Mosaic` (8.4.190): four loaded images around a random centre of a
//! `2 * imgsz` square canvas filled with grey 114.
//!
//! With centre (xc, yc) and canvas side `2s`, the sample's own image ends at the centre (top
//! left), the others start there: top right, bottom left, bottom right. Each image keeps the
//! part that fits, cropped on the side away from the centre. Boxes move by the offset of each
//! image's top-left corner (negative where it was cropped), are clipped to the canvas, and boxes
//! left with zero area are dropped.

use super::draws::MosaicDraw;
use super::sample::{clip_boxes, Labeled, TrainImage};
use super::warp_source::WarpSource;
use crate::vision::boxes::Box4;
use crate::vision::letterbox::PAD_VALUE;
use crate::{Error, Result};
use image::{Rgb, RgbImage};
use std::borrow::Cow;

/// Where one image goes: its source rectangle and its top-left corner in the canvas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// `[x1, y1, x2, y2]` in the canvas (ultralytics' `x1a..y2a`).
    pub canvas: [usize; 4],
    /// `[x1, y1, x2, y2]` in the image (`x1b..y2b`).
    pub source: [usize; 4],
}

impl Placement {
    /// The offset added to the image's pixel coordinates (`padw`, `padh`).
    pub fn offset(&self) -> (i64, i64) {
        (
            self.canvas[0] as i64 - self.source[0] as i64,
            self.canvas[1] as i64 - self.source[1] as i64,
        )
    }
}

/// The placements of images of sizes `sizes` ((w, h), in mosaic order) around `center` in a
/// `2 * imgsz` canvas.
pub fn layout(sizes: [(usize, usize); 4], imgsz: usize, center: (usize, usize)) -> [Placement; 4] {
    let side = 2 * imgsz;
    let (xc, yc) = center;
    std::array::from_fn(|i| {
        let (w, h) = sizes[i];
        match i {
            0 => {
                let canvas = [xc.saturating_sub(w), yc.saturating_sub(h), xc, yc];
                let (cw, ch) = (canvas[2] - canvas[0], canvas[3] - canvas[1]);
                Placement {
                    canvas,
                    source: [w - cw, h - ch, w, h],
                }
            }
            1 => {
                let canvas = [xc, yc.saturating_sub(h), (xc + w).min(side), yc];
                let (cw, ch) = (canvas[2] - canvas[0], canvas[3] - canvas[1]);
                Placement {
                    canvas,
                    source: [0, h - ch, w.min(cw), h],
                }
            }
            2 => {
                let canvas = [xc.saturating_sub(w), yc, xc, (yc + h).min(side)];
                let (cw, ch) = (canvas[2] - canvas[0], canvas[3] - canvas[1]);
                Placement {
                    canvas,
                    source: [w - cw, 0, w, ch.min(h)],
                }
            }
            _ => {
                let canvas = [xc, yc, (xc + w).min(side), (yc + h).min(side)];
                let (cw, ch) = (canvas[2] - canvas[0], canvas[3] - canvas[1]);
                Placement {
                    canvas,
                    source: [0, 0, w.min(cw), ch.min(h)],
                }
            }
        }
    })
}

/// The mosaic of `tiles` (the sample's own image first, then `draw.others` in order) for
/// training size `imgsz`: the `2 * imgsz` canvas and every tile's boxes in it, in corners.
pub fn mosaic4(tiles: [&TrainImage; 4], imgsz: usize, draw: &MosaicDraw) -> Result<Labeled> {
    let (canvas, classes, boxes) = mosaic4_canvas(tiles, imgsz, draw)?;
    Ok(Labeled {
        image: canvas.render(),
        classes,
        boxes,
    })
}

/// [`mosaic4`] with the canvas left unbuilt: where each tile goes (a [`MosaicCanvas`], which a
/// warp reads directly), and the classes and boxes in canvas corners.
pub fn mosaic4_canvas<'a>(
    tiles: [&'a TrainImage; 4],
    imgsz: usize,
    draw: &MosaicDraw,
) -> Result<(MosaicCanvas<'a>, Vec<usize>, Vec<Box4>)> {
    let side = 2 * imgsz;
    let (xc, yc) = draw.center;
    if xc > side || yc > side {
        return Err(Error::invalid(
            "mosaic",
            format!("centre ({xc}, {yc}) is outside the {side}x{side} canvas"),
        ));
    }
    let sizes = tiles.map(|t| (t.image.width() as usize, t.image.height() as usize));
    if let Some(&(w, h)) = sizes.iter().find(|&&(w, h)| w > imgsz || h > imgsz) {
        return Err(Error::invalid(
            "mosaic",
            format!("a {w}x{h} image is larger than imgsz {imgsz}: load it resized first"),
        ));
    }
    let placements = layout(sizes, imgsz, draw.center);
    let mut classes = Vec::new();
    let mut boxes = Vec::new();
    for (tile, place) in tiles.iter().zip(&placements) {
        let (pad_x, pad_y) = place.offset();
        classes.extend_from_slice(&tile.classes);
        boxes.extend(tile.pixel_boxes(pad_x as f32, pad_y as f32));
    }
    clip_boxes(&mut boxes, side as f32, side as f32);
    let keep: Vec<bool> = boxes
        .iter()
        .map(|b| (b[2] - b[0]) * (b[3] - b[1]) > 0.0)
        .collect();
    let canvas = MosaicCanvas {
        tiles: tiles.map(|t| &t.image),
        placements,
        side,
    };
    Ok((canvas, filter(&classes, &keep), filter(&boxes, &keep)))
}

/// A mosaic's canvas, unbuilt: grey 114 with each tile's source rectangle at its placement.
#[derive(Clone, Copy, Debug)]
pub struct MosaicCanvas<'a> {
    pub tiles: [&'a RgbImage; 4],
    pub placements: [Placement; 4],
    /// The canvas is `side` x `side`.
    pub side: usize,
}

impl MosaicCanvas<'_> {
    /// The whole canvas as an image.
    pub fn render(&self) -> RgbImage {
        let mut canvas =
            RgbImage::from_pixel(self.side as u32, self.side as u32, Rgb([PAD_VALUE; 3]));
        for (tile, place) in self.tiles.iter().zip(&self.placements) {
            paste(&mut canvas, tile, place);
        }
        canvas
    }
}

impl WarpSource for MosaicCanvas<'_> {
    fn size(&self) -> (usize, usize) {
        (self.side, self.side)
    }

    fn read_row(&self, y: usize, x0: usize, x1: usize, out: &mut [u8]) {
        out.fill(PAD_VALUE);
        for (tile, place) in self.tiles.iter().zip(&self.placements) {
            let [cx1, cy1, cx2, cy2] = place.canvas;
            let (a, b) = (cx1.max(x0), cx2.min(x1));
            if y < cy1 || y >= cy2 || a >= b {
                continue;
            }
            let [sx1, sy1, ..] = place.source;
            let start = ((sy1 + y - cy1) * tile.width() as usize + sx1 + a - cx1) * 3;
            let n = (b - a) * 3;
            out[(a - x0) * 3..(a - x0) * 3 + n].copy_from_slice(&tile.as_raw()[start..start + n]);
        }
    }

    fn to_image(&self) -> Cow<'_, RgbImage> {
        Cow::Owned(self.render())
    }
}

/// Copies the placement's source rectangle of `img` into `canvas`, row by row.
fn paste(canvas: &mut RgbImage, img: &RgbImage, place: &Placement) {
    let [cx1, cy1, cx2, cy2] = place.canvas;
    let [sx1, sy1, ..] = place.source;
    let (cw, iw) = (canvas.width() as usize, img.width() as usize);
    let n = (cx2 - cx1) * 3;
    let (dst, src) = (canvas.as_mut(), img.as_raw());
    for row in 0..cy2 - cy1 {
        let d = ((cy1 + row) * cw + cx1) * 3;
        let s = ((sy1 + row) * iw + sx1) * 3;
        dst[d..d + n].copy_from_slice(&src[s..s + n]);
    }
}

/// The items whose `keep` flag is set.
pub(crate) fn filter<T: Clone>(items: &[T], keep: &[bool]) -> Vec<T> {
    items
        .iter()
        .zip(keep)
        .filter(|(_, &k)| k)
        .map(|(t, _)| t.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tile(w: u32, h: u32, value: u8, boxes: Vec<[f32; 4]>) -> TrainImage {
        TrainImage {
            image: RgbImage::from_pixel(w, h, Rgb([value; 3])),
            classes: (0..boxes.len()).collect(),
            boxes,
        }
    }

    #[test]
    fn images_meet_at_the_centre_and_the_rest_is_grey() {
        let tiles = [
            tile(40, 30, 1, vec![]),
            tile(20, 50, 2, vec![]),
            tile(64, 10, 3, vec![]),
            tile(30, 30, 4, vec![]),
        ];
        let draw = MosaicDraw {
            center: (50, 70),
            others: [1, 2, 3],
        };
        let out = mosaic4([&tiles[0], &tiles[1], &tiles[2], &tiles[3]], 64, &draw).unwrap();
        let at = |x, y| out.image.get_pixel(x, y)[0];
        // Top left ends at (49, 69), top right starts at (50, 20), bottom left ends at (49, 79)
        // (cropped to 50 wide), bottom right covers (50..80, 70..100).
        assert_eq!((at(49, 69), at(10, 40), at(9, 40)), (1, 1, 114));
        assert_eq!(
            (at(50, 69), at(69, 20), at(70, 20), at(50, 19)),
            (2, 2, 114, 114)
        );
        assert_eq!((at(0, 70), at(49, 79), at(0, 80)), (3, 3, 114));
        assert_eq!((at(50, 70), at(79, 99), at(80, 99)), (4, 4, 114));
    }

    #[test]
    fn boxes_move_with_their_image_and_are_clipped() {
        // A box covering the whole bottom-left tile, which is cropped on its left by 14 px.
        let tiles = [
            tile(40, 30, 1, vec![]),
            tile(20, 50, 2, vec![]),
            tile(64, 10, 3, vec![[0.5, 0.5, 1.0, 1.0]]),
            tile(30, 30, 4, vec![[0.5, 0.5, 0.25, 0.25]]),
        ];
        let draw = MosaicDraw {
            center: (50, 70),
            others: [1, 2, 3],
        };
        let out = mosaic4([&tiles[0], &tiles[1], &tiles[2], &tiles[3]], 64, &draw).unwrap();
        assert_eq!(out.classes, vec![0, 0]);
        assert_eq!(out.boxes[0], [0.0, 70.0, 50.0, 80.0]);
        assert_eq!(out.boxes[1], [61.25, 81.25, 68.75, 88.75]);
    }

    #[test]
    fn boxes_cropped_away_are_dropped() {
        // The top-left tile is cropped to its right 10 columns; a box on its left third goes.
        let tiles = [
            tile(60, 20, 1, vec![[0.1, 0.5, 0.2, 0.5]]),
            tile(8, 8, 2, vec![]),
            tile(8, 8, 3, vec![]),
            tile(8, 8, 4, vec![]),
        ];
        let draw = MosaicDraw {
            center: (10, 40),
            others: [1, 2, 3],
        };
        let out = mosaic4([&tiles[0], &tiles[1], &tiles[2], &tiles[3]], 64, &draw).unwrap();
        assert!(out.boxes.is_empty() && out.classes.is_empty());
    }

    #[test]
    fn canvas_rows_read_what_the_rendered_canvas_holds() {
        let noisy = |w: u32, h: u32, seed: u32| TrainImage {
            image: RgbImage::from_fn(w, h, |x, y| {
                Rgb([
                    (x * 7 + y * 13 + seed) as u8,
                    (x * y + seed) as u8,
                    (x ^ y) as u8,
                ])
            }),
            classes: vec![],
            boxes: vec![],
        };
        let tiles = [
            noisy(40, 30, 1),
            noisy(20, 50, 2),
            noisy(64, 10, 3),
            noisy(30, 64, 4),
        ];
        for center in [(50, 70), (0, 0), (128, 128), (3, 120), (64, 64)] {
            let draw = MosaicDraw {
                center,
                others: [1, 2, 3],
            };
            let (canvas, ..) =
                mosaic4_canvas([&tiles[0], &tiles[1], &tiles[2], &tiles[3]], 64, &draw).unwrap();
            let whole = canvas.render();
            for y in 0..128 {
                for (x0, x1) in [(0, 128), (13, 77), (50, 51), (90, 90)] {
                    let mut row = vec![0; (x1 - x0) * 3];
                    canvas.read_row(y, x0, x1, &mut row);
                    let at = (y * 128 + x0) * 3;
                    assert_eq!(
                        row,
                        whole.as_raw()[at..at + row.len()],
                        "{center:?} row {y}"
                    );
                }
            }
        }
    }

    #[test]
    fn oversized_tiles_are_an_error() {
        let big = tile(65, 10, 0, vec![]);
        let small = tile(8, 8, 0, vec![]);
        let draw = MosaicDraw {
            center: (64, 64),
            others: [0; 3],
        };
        let err = mosaic4([&big, &small, &small, &small], 64, &draw).unwrap_err();
        assert!(err.to_string().contains("larger than imgsz"), "{err}");
    }
}
