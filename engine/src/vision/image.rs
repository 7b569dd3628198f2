//! Image files to and from U8 HWC RGB tensors.
//!
//! Decoding follows what ultralytics reads through OpenCV's `imdecode(IMREAD_COLOR)`: every
//! image comes out as 8-bit RGB (grey repeated, alpha dropped, 16-bit reduced to its high
//! byte) and the EXIF orientation of JPEGs and PNGs is applied. JPEGs go through
//! libjpeg-turbo's decoder (`jpeg`), so their pixels equal OpenCV's; alpha is dropped rather
//! than composited, as OpenCV does too. ultralytics keeps BGR; we keep RGB, which is what its
//! models are fed.

use super::exif;
use crate::{bail, Error, Result, Tensor};
use image::{DynamicImage, ImageFormat, RgbImage};
use std::path::Path;

/// Reads and decodes a JPEG or PNG file into an RGB image, upright per its EXIF orientation.
pub fn read_rgb(path: impl AsRef<Path>) -> Result<RgbImage> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    decode_rgb(&bytes).map_err(|e| name_file(e, path))
}

/// Decodes JPEG or PNG bytes into an RGB image, upright per its EXIF orientation.
pub fn decode_rgb(bytes: &[u8]) -> Result<RgbImage> {
    if bytes.is_empty() {
        return Err(Error::format("image", "empty file"));
    }
    let upright = |img| exif::apply(img, exif::orientation(bytes));
    if bytes.starts_with(&[0xFF, 0xD8]) {
        return super::jpeg::decode(bytes).map(upright);
    }
    let decoded = image::load_from_memory(bytes)
        .map_err(|e| Error::format("image", format!("cannot decode: {e}")))?;
    Ok(upright(to_rgb8(decoded)))
}

/// Reads an image file into a U8 tensor of shape [H, W, 3] (RGB) on the host.
pub fn read_image(path: impl AsRef<Path>) -> Result<Tensor> {
    rgb_to_tensor(read_rgb(path)?)
}

/// Decodes JPEG or PNG bytes into a U8 tensor of shape [H, W, 3] (RGB) on the host.
pub fn decode_image(bytes: &[u8]) -> Result<Tensor> {
    rgb_to_tensor(decode_rgb(bytes)?)
}

/// The (width, height) of an image file as decoding would give it (EXIF rotations swap the two),
/// read from the header without decoding the pixels.
pub fn image_size(path: impl AsRef<Path>) -> Result<(usize, usize)> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let reader = image::io::Reader::new(std::io::Cursor::new(&bytes))
        .with_guessed_format()
        .map_err(|e| Error::io(path, e))?;
    let (w, h) = reader.into_dimensions().map_err(|e| {
        name_file(
            Error::format("image", format!("cannot read the header: {e}")),
            path,
        )
    })?;
    let (w, h) = (w as usize, h as usize);
    Ok(if exif::swaps_axes(exif::orientation(&bytes)) {
        (h, w)
    } else {
        (w, h)
    })
}

/// Writes a U8 [H, W, 3] RGB tensor as PNG or JPEG (quality 95), chosen by the extension.
pub fn save_image(t: &Tensor, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let img = tensor_to_rgb(t)?;
    // Like the other writers (plots, checkpoints), a missing output folder is created.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("png") => img.save_with_format(path, ImageFormat::Png).map_err(|e| {
            name_file(
                Error::format("image", format!("cannot write PNG: {e}")),
                path,
            )
        }),
        Some("jpg" | "jpeg") => {
            let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
            let mut out = std::io::BufWriter::new(file);
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 95)
                .encode_image(&img)
                .map_err(|e| {
                    name_file(
                        Error::format("image", format!("cannot write JPEG: {e}")),
                        path,
                    )
                })
        }
        _ => bail!(
            "save_image",
            "{}: the extension must be .png, .jpg or .jpeg",
            path.display()
        ),
    }
}

/// An RGB image as a U8 [H, W, 3] tensor.
pub fn rgb_to_tensor(img: RgbImage) -> Result<Tensor> {
    let (w, h) = (img.width() as usize, img.height() as usize);
    Tensor::from_vec(img.into_raw(), &[h, w, 3])
}

/// A U8 [H, W, 3] tensor as an RGB image (any device; copied to the host).
pub fn tensor_to_rgb(t: &Tensor) -> Result<RgbImage> {
    let dims = t.dims();
    if t.dtype() != crate::DType::U8 || dims.len() != 3 || dims[2] != 3 {
        bail!(
            "image",
            "expected a u8 tensor of shape [H, W, 3], got {} {:?}",
            t.dtype().name(),
            dims
        );
    }
    let (h, w) = (dims[0], dims[1]);
    let data = t.to_vec::<u8>()?;
    match (u32::try_from(w), u32::try_from(h)) {
        (Ok(w), Ok(h)) => RgbImage::from_raw(w, h, data)
            .ok_or_else(|| Error::invalid("image", "pixel count does not match the shape")),
        _ => bail!("image", "image of {w}x{h} is too large"),
    }
}

/// 8-bit RGB from any decoded layout. 16-bit samples keep their high byte (as OpenCV's
/// IMREAD_COLOR does) rather than `image`'s rounding division by 257.
fn to_rgb8(decoded: DynamicImage) -> RgbImage {
    match decoded {
        DynamicImage::ImageRgb8(img) => img,
        DynamicImage::ImageLuma16(_)
        | DynamicImage::ImageLumaA16(_)
        | DynamicImage::ImageRgb16(_)
        | DynamicImage::ImageRgba16(_) => {
            let rgb16 = decoded.to_rgb16();
            let (w, h) = rgb16.dimensions();
            let bytes = rgb16
                .into_raw()
                .into_iter()
                .map(|v| (v >> 8) as u8)
                .collect();
            RgbImage::from_raw(w, h, bytes).expect("same dimensions")
        }
        other => other.to_rgb8(),
    }
}

/// Prefixes an error with the file it came from.
fn name_file(e: Error, path: &Path) -> Error {
    match e {
        Error::Format { format, msg } => Error::Format {
            format,
            msg: format!("{}: {msg}", path.display()),
        },
        other => other,
    }
}
