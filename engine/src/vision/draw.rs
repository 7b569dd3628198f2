//! Boxes with labels drawn onto an image, in the manner of ultralytics' `Annotator`: an
//! outline of width `max(round((h + w + 3) / 2 * 0.003), 2)` (its formula, which sums the
//! whole HWC shape), a filled label tab above the box's top-left corner (inside the box when
//! there is no room above, moved left when it would leave the image), and the text in white or,
//! on light colours, dark. Text is rasterised with `ab_glyph` from the Ubuntu Light font that
//! `epaint_default_fonts` embeds, so no font file is needed at run time.

use super::image::{rgb_to_tensor, tensor_to_rgb};
use crate::{Result, Tensor};
use ab_glyph::{Font, FontRef, PxScale, ScaleFont};
use image::{Rgb, RgbImage};

/// ultralytics' 20-colour palette (`utils.plotting.Colors`), RGB.
pub const PALETTE: [[u8; 3]; 20] = [
    [0x04, 0x2A, 0xFF],
    [0x0B, 0xDB, 0xEB],
    [0xF3, 0xF3, 0xF3],
    [0x00, 0xDF, 0xB7],
    [0x11, 0x1F, 0x68],
    [0xFF, 0x6F, 0xDD],
    [0xFF, 0x44, 0x4F],
    [0xCC, 0xED, 0x00],
    [0x00, 0xF3, 0x44],
    [0xBD, 0x00, 0xFF],
    [0x00, 0xB4, 0xFF],
    [0xDD, 0x00, 0xBA],
    [0x00, 0xFF, 0xFF],
    [0x26, 0xC0, 0x00],
    [0x01, 0xFF, 0xB3],
    [0x7D, 0x24, 0xFF],
    [0x7B, 0x00, 0x68],
    [0xFF, 0x1B, 0x6C],
    [0xFC, 0x6D, 0x2F],
    [0xA2, 0xFF, 0x0B],
];

/// The palette colour of class `class` (cycling through the 20).
pub fn class_color(class: usize) -> [u8; 3] {
    PALETTE[class % PALETTE.len()]
}

/// One box to draw: corners in pixels, its label (empty: none) and colour.
#[derive(Clone, Debug, PartialEq)]
pub struct DrawBox {
    pub xyxy: [f32; 4],
    pub label: String,
    pub color: [u8; 3],
}

/// A copy of a U8 [H, W, 3] image with the boxes drawn on it.
pub fn draw_boxes(image: &Tensor, boxes: &[DrawBox]) -> Result<Tensor> {
    let mut img = tensor_to_rgb(image)?;
    draw_boxes_rgb(&mut img, boxes);
    rgb_to_tensor(img)
}

/// Draws boxes in place. Boxes partly or wholly outside the image are clipped.
pub fn draw_boxes_rgb(img: &mut RgbImage, boxes: &[DrawBox]) {
    let (w, h) = (img.width() as i64, img.height() as i64);
    if w == 0 || h == 0 {
        return;
    }
    let lw = (((h + w + 3) as f64 / 2.0 * 0.003).round() as i64).max(2);
    let font = FontRef::try_from_slice(epaint_default_fonts::UBUNTU_LIGHT).ok();
    for b in boxes {
        if b.xyxy.iter().any(|v| !v.is_finite()) {
            continue;
        }
        let [x0, y0, x1, y1] = b.xyxy.map(|v| v.round() as i64);
        // The outline lies inside the box, as thick as lw.
        fill_rect(img, x0, y0, x1, y0 + lw, b.color);
        fill_rect(img, x0, y1 - lw, x1, y1, b.color);
        fill_rect(img, x0, y0, x0 + lw, y1, b.color);
        fill_rect(img, x1 - lw, y0, x1, y1, b.color);
        if let (false, Some(font)) = (b.label.is_empty(), &font) {
            draw_label(img, font, lw, (x0, y0), &b.label, b.color);
        }
    }
}

/// The label tab and its text at the box's top-left corner `p`.
fn draw_label(
    img: &mut RgbImage,
    font: &FontRef,
    lw: i64,
    p: (i64, i64),
    text: &str,
    color: [u8; 3],
) {
    let scale = PxScale::from((lw as f32 * 7.0).max(12.0));
    let scaled = font.as_scaled(scale);
    let text_w: f32 = text
        .chars()
        .map(|c| scaled.h_advance(scaled.glyph_id(c)))
        .sum();
    let (tw, th) = (
        text_w.ceil() as i64 + 2 * lw,
        (scaled.ascent() - scaled.descent()).ceil() as i64 + 2,
    );
    let outside = p.1 >= th;
    let left = p.0.min(img.width() as i64 - tw).max(0);
    let top = if outside { p.1 - th } else { p.1.max(0) };
    fill_rect(img, left, top, left + tw, top + th, color);
    let ink = text_color(color);
    let mut x = left as f32 + lw as f32;
    let baseline = top as f32 + 1.0 + scaled.ascent();
    for c in text.chars() {
        let glyph = scaled.scaled_glyph(c);
        let advance = scaled.h_advance(glyph.id);
        let positioned = ab_glyph::Glyph {
            position: ab_glyph::point(x, baseline),
            ..glyph
        };
        if let Some(outline) = font.outline_glyph(positioned) {
            let bounds = outline.px_bounds();
            outline.draw(|gx, gy, coverage| {
                let (px, py) = (
                    bounds.min.x as i64 + gx as i64,
                    bounds.min.y as i64 + gy as i64,
                );
                blend(img, px, py, ink, coverage);
            });
        }
        x += advance;
    }
}

/// White text, or dark text on light colours (by luma).
fn text_color(bg: [u8; 3]) -> [u8; 3] {
    let luma = 0.299 * bg[0] as f32 + 0.587 * bg[1] as f32 + 0.114 * bg[2] as f32;
    if luma > 160.0 {
        [17, 31, 104]
    } else {
        [255, 255, 255]
    }
}

/// Fills [x0, x1) x [y0, y1), clipped to the image.
fn fill_rect(img: &mut RgbImage, x0: i64, y0: i64, x1: i64, y1: i64, color: [u8; 3]) {
    let (w, h) = (img.width() as i64, img.height() as i64);
    for y in y0.max(0)..y1.min(h) {
        for x in x0.max(0)..x1.min(w) {
            img.put_pixel(x as u32, y as u32, Rgb(color));
        }
    }
}

fn blend(img: &mut RgbImage, x: i64, y: i64, color: [u8; 3], alpha: f32) {
    if x < 0 || y < 0 || x >= img.width() as i64 || y >= img.height() as i64 {
        return;
    }
    let p = img.get_pixel_mut(x as u32, y as u32);
    let a = alpha.clamp(0.0, 1.0);
    for (v, c) in p.0.iter_mut().zip(color) {
        *v = (*v as f32 * (1.0 - a) + c as f32 * a).round() as u8;
    }
}
