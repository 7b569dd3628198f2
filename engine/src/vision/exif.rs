//! The EXIF orientation tag (0x0112) of a JPEG (APP1 `Exif`) or PNG (`eXIf` chunk), and the
//! flips and transposes that apply it.
//!
//! `image` 0.24 ignores EXIF, while OpenCV's `imread`/`imdecode` with `IMREAD_COLOR` (what
//! ultralytics reads through) rotates the pixels upright. We read the tag ourselves so that
//! decoded images and their sizes match. The bytes are untrusted: every read is bounds-checked
//! and an unreadable EXIF block means "no orientation", as it does for OpenCV.

use image::RgbImage;

/// The orientation value (1..=8) of an encoded JPEG or PNG, `None` when absent or unreadable.
pub fn orientation(bytes: &[u8]) -> Option<u16> {
    let tiff = if bytes.starts_with(&[0xFF, 0xD8]) {
        jpeg_exif(bytes)?
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        png_exif(bytes)?
    } else {
        return None;
    };
    let value = tiff_orientation(tiff)?;
    (1..=8).contains(&value).then_some(value)
}

/// Whether an orientation swaps width and height (5..=8 are the transposed ones).
pub fn swaps_axes(orientation: Option<u16>) -> bool {
    matches!(orientation, Some(5..=8))
}

/// The TIFF block inside the first APP1 `Exif\0\0` segment before the image data.
fn jpeg_exif(bytes: &[u8]) -> Option<&[u8]> {
    let mut pos = 2;
    loop {
        let marker = *bytes.get(pos + 1)?;
        if *bytes.get(pos)? != 0xFF {
            return None;
        }
        // Start of scan or end of image: no metadata after this point.
        if marker == 0xDA || marker == 0xD9 {
            return None;
        }
        let len = u16::from_be_bytes([*bytes.get(pos + 2)?, *bytes.get(pos + 3)?]) as usize;
        let body = bytes.get(pos + 4..pos + 2 + len)?;
        if marker == 0xE1 && body.starts_with(b"Exif\0\0") {
            return Some(&body[6..]);
        }
        pos += 2 + len;
    }
}

/// The data of the `eXIf` chunk, if any chunk before `IDAT` carries one.
fn png_exif(bytes: &[u8]) -> Option<&[u8]> {
    let mut pos = 8;
    loop {
        let len = u32::from_be_bytes(bytes.get(pos..pos + 4)?.try_into().ok()?) as usize;
        let kind = bytes.get(pos + 4..pos + 8)?;
        let data = bytes.get(pos + 8..(pos + 8).checked_add(len)?)?;
        match kind {
            b"eXIf" => return Some(data),
            b"IEND" => return None,
            _ => pos += 12 + len,
        }
    }
}

/// Tag 0x0112 of IFD0 in a TIFF block (byte order `II` or `MM`).
fn tiff_orientation(tiff: &[u8]) -> Option<u16> {
    let little = match tiff.get(0..2)? {
        b"II" => true,
        b"MM" => false,
        _ => return None,
    };
    let u16_at = |at: usize| -> Option<u16> {
        let b: [u8; 2] = tiff.get(at..at + 2)?.try_into().ok()?;
        Some(if little {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        })
    };
    let u32_at = |at: usize| -> Option<u32> {
        let b: [u8; 4] = tiff.get(at..at + 4)?.try_into().ok()?;
        Some(if little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let ifd = u32_at(4)? as usize;
    let entries = u16_at(ifd)? as usize;
    for i in 0..entries {
        let entry = ifd + 2 + 12 * i;
        if u16_at(entry)? == 0x0112 {
            // Type SHORT, count 1: the value sits in the first two bytes of the value field.
            return u16_at(entry + 8);
        }
    }
    None
}

/// Applies an orientation as OpenCV's `ApplyExifOrientation` does: 2 mirror, 3 rotate 180,
/// 4 flip vertically, 5 transpose, 6 rotate 90° clockwise, 7 transverse, 8 rotate 90°
/// counter-clockwise.
pub fn apply(img: RgbImage, orientation: Option<u16>) -> RgbImage {
    use image::imageops::{flip_horizontal, flip_vertical, rotate180, rotate270, rotate90};
    match orientation {
        Some(2) => flip_horizontal(&img),
        Some(3) => rotate180(&img),
        Some(4) => flip_vertical(&img),
        Some(5) => flip_horizontal(&rotate90(&img)),
        Some(6) => rotate90(&img),
        Some(7) => flip_horizontal(&rotate270(&img)),
        Some(8) => rotate270(&img),
        _ => img,
    }
}
