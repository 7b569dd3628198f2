//! Captioned image folders for text-to-image training: every image under the folder with its
//! caption, from a `.txt` file of the same stem beside it (kohya's sd-scripts layout) or from a
//! `metadata.jsonl` at the root whose rows are `{"file_name": ..., "text": ...}` (Hugging
//! Face's imagefolder, which diffusers' training scripts read). Images come out as diffusers'
//! `train_text_to_image` prepares them: resized so the short side is the size (bilinear),
//! centre-cropped to a square, in [-1, 1].

use super::image_folder::{images_under, IMAGE_EXTENSIONS};
use crate::vision::image::read_rgb;
use crate::vision::pil_resize::{resize_pil, PilFilter};
use crate::{DType, Error, Result, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub struct CaptionedImages {
    pub root: PathBuf,
    /// (image, caption) in sorted path order.
    pub samples: Vec<(PathBuf, String)>,
}

impl CaptionedImages {
    /// Reads the folder. An image with no caption (no `.txt` beside it and no row in
    /// `metadata.jsonl`) is an error naming it, as is a folder without images.
    pub fn open(root: impl AsRef<Path>) -> Result<CaptionedImages> {
        let root = root.as_ref().to_path_buf();
        let bad = |msg: String| Error::invalid("captioned_images", msg);
        if !root.is_dir() {
            return Err(bad(format!("{} is not a folder", root.display())));
        }
        let mut files = Vec::new();
        images_under(&root, &mut files)?;
        if files.is_empty() {
            return Err(bad(format!(
                "{} has no images ({})",
                root.display(),
                IMAGE_EXTENSIONS.join(", ")
            )));
        }
        let metadata = read_metadata(&root)?;
        let mut samples = Vec::with_capacity(files.len());
        for file in files {
            let txt = file.with_extension("txt");
            let caption = if txt.is_file() {
                std::fs::read_to_string(&txt)
                    .map_err(|e| Error::io(&txt, e))?
                    .trim()
                    .to_string()
            } else {
                let rel = file
                    .strip_prefix(&root)
                    .unwrap_or(&file)
                    .to_string_lossy()
                    .replace('\\', "/");
                metadata.get(&rel).cloned().ok_or_else(|| {
                    bad(format!(
                        "{} has no caption: no {} beside it and no metadata.jsonl row for `{rel}`",
                        file.display(),
                        txt.file_name().unwrap_or_default().to_string_lossy()
                    ))
                })?
            };
            samples.push((file, caption));
        }
        Ok(CaptionedImages { root, samples })
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Images `indices` as [N, 3, side, side] (F32 in [-1, 1]) and their captions.
    pub fn batch(&self, indices: &[usize], side: usize) -> Result<(Tensor, Vec<String>)> {
        if side == 0 || side > 8192 {
            return Err(Error::invalid(
                "captioned_images",
                format!("the image size {side} is outside 1..=8192"),
            ));
        }
        let mut images = Vec::with_capacity(indices.len());
        let mut captions = Vec::with_capacity(indices.len());
        for &i in indices {
            let (path, caption) = self.samples.get(i).ok_or_else(|| {
                Error::invalid(
                    "captioned_images",
                    format!("image {i} of {}", self.samples.len()),
                )
            })?;
            images.push(square(path, side)?);
            captions.push(caption.clone());
        }
        Ok((Tensor::stack(&images, 0)?, captions))
    }
}

/// `metadata.jsonl`'s captions by file name, or none without the file.
fn read_metadata(root: &Path) -> Result<HashMap<String, String>> {
    let path = root.join("metadata.jsonl");
    if !path.is_file() {
        return Ok(HashMap::new());
    }
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let mut out = HashMap::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = || {
            Error::format(
                "metadata.jsonl",
                format!(
                    "{} line {}: a row is {{\"file_name\": ..., \"text\": ...}}",
                    path.display(),
                    n + 1
                ),
            )
        };
        let row: serde_json::Value = serde_json::from_str(line).map_err(|_| bad())?;
        let (Some(file), Some(caption)) = (
            row.get("file_name").and_then(|v| v.as_str()),
            row.get("text").and_then(|v| v.as_str()),
        ) else {
            return Err(bad());
        };
        out.insert(file.to_string(), caption.to_string());
    }
    Ok(out)
}

/// An image resized so its short side is `side` (Pillow's bilinear, as torchvision's Resize)
/// and centre-cropped to side × side: [3, side, side] in [-1, 1].
fn square(path: &Path, side: usize) -> Result<Tensor> {
    let img = read_rgb(path)?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    // torchvision: the long side int(size * long / short).
    let (rw, rh) = match w <= h {
        true => (side, (side * h / w).max(side)),
        false => ((side * w / h).max(side), side),
    };
    let resized = resize_pil(&img, rw, rh, PilFilter::Bilinear);
    // torchvision's CenterCrop: int(round(excess / 2)), Python's round (halves to even).
    let top = ((rh - side) as f64 / 2.0).round_ties_even() as usize;
    let left = ((rw - side) as f64 / 2.0).round_ties_even() as usize;
    crate::vision::image::rgb_to_tensor(resized)?
        .narrow(0, top, side)?
        .narrow(1, left, side)?
        .to_dtype(DType::F32)?
        .mul_scalar(1.0 / 127.5)?
        .add_scalar(-1.0)?
        .permute(&[2, 0, 1])?
        .contiguous()
}
