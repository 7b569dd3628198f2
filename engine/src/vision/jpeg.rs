//! JPEG decoding with libjpeg-turbo's decoder (the copy inside mozjpeg, built from source), so
//! that pixels equal OpenCV's `imread`/`imdecode(IMREAD_COLOR)`, which is what ultralytics
//! reads through: the accurate integer IDCT (`JDCT_ISLOW`), "fancy" triangular chroma
//! upsampling, libjpeg's fixed-point YCbCr conversion, and its handling of damaged data
//! (a warning, then gray for the missing part; not an error). Greyscale comes out with its
//! value in all three channels; CMYK and YCCK files are converted as OpenCV converts them
//! (Adobe's inverted CMYK). `jpeg-decoder`, what the `image` crate uses, differs from this by
//! up to 4 levels on 3-17% of the values of real photos, enough to move a detector's scores.

use crate::{Error, Result};
use image::RgbImage;
use mozjpeg::{ColorSpace, Decompress};

/// Images above this many bytes of RGB are refused before decoding (as `image`'s default
/// limit refuses them): a 2 KB header can claim 65,535 × 65,535 pixels.
const MAX_RGB_BYTES: usize = 512 << 20;

/// Decodes JPEG bytes into RGB, as OpenCV does (without the EXIF orientation, which the
/// caller applies).
pub fn decode(bytes: &[u8]) -> Result<RgbImage> {
    // libjpeg reports a fatal error by unwinding out of its C code (mozjpeg's error
    // manager); it is caught here and becomes an error naming libjpeg's message.
    match std::panic::catch_unwind(|| decode_unguarded(bytes)) {
        Ok(result) => result,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "libjpeg stopped".to_string());
            Err(bad(msg))
        }
    }
}

fn bad(msg: impl std::fmt::Display) -> Error {
    Error::format("jpeg", format!("cannot decode: {msg}"))
}

fn decode_unguarded(bytes: &[u8]) -> Result<RgbImage> {
    let d = Decompress::new_mem(bytes).map_err(bad)?;
    let (w, h) = d.size();
    let rgb_bytes = w.saturating_mul(h).saturating_mul(3);
    if rgb_bytes > MAX_RGB_BYTES {
        return Err(bad(format!(
            "{w}x{h} pixels ({} MiB as RGB) is over the {} MiB limit",
            rgb_bytes >> 20,
            MAX_RGB_BYTES >> 20
        )));
    }
    let cmyk = d.components().len() == 4;
    let pixels: Vec<u8> = if cmyk {
        // libjpeg turns YCCK into CMYK; the last step is OpenCV's.
        let mut started = d.to_colorspace(ColorSpace::JCS_CMYK).map_err(bad)?;
        let cmyk: Vec<[u8; 4]> = started.read_scanlines().map_err(bad)?;
        started.finish().map_err(bad)?;
        cmyk.iter().flat_map(|&p| cmyk_to_rgb(p)).collect()
    } else {
        let mut started = d.rgb().map_err(bad)?;
        let rgb: Vec<u8> = started.read_scanlines().map_err(bad)?;
        started.finish().map_err(bad)?;
        rgb
    };
    if pixels.len() != rgb_bytes {
        return Err(bad(format!(
            "{} of the {h} rows came out",
            pixels.len() / (3 * w.max(1))
        )));
    }
    RgbImage::from_raw(w as u32, h as u32, pixels)
        .ok_or_else(|| bad(format!("{w}x{h} is not a valid image size")))
}

/// OpenCV's CMYK to RGB for what libjpeg outputs (Adobe's inverted CMYK, as Photoshop writes
/// it): each channel is `k - (255 - c) * k / 256`, rounded down.
fn cmyk_to_rgb([c, m, y, k]: [u8; 4]) -> [u8; 3] {
    let k = k as i32;
    let ink = |v: u8| (k - (((255 - v as i32) * k) >> 8)) as u8;
    [ink(c), ink(m), ink(y)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_or_foreign_bytes_are_errors_not_aborts() {
        for bytes in [
            &b"\xFF\xD8\xFF\xE0junk"[..],
            b"\xFF\xD8",
            b"not a jpeg at all",
        ] {
            let err = decode(bytes).unwrap_err().to_string();
            assert!(err.contains("cannot decode"), "{err}");
        }
    }

    #[test]
    fn cmyk_is_converted_as_opencv_converts_it() {
        assert_eq!(cmyk_to_rgb([255, 255, 255, 255]), [255, 255, 255]);
        assert_eq!(cmyk_to_rgb([0, 128, 255, 255]), [1, 129, 255]);
        assert_eq!(cmyk_to_rgb([10, 20, 30, 0]), [0, 0, 0]);
    }
}
