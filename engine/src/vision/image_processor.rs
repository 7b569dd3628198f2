//! A vision checkpoint's preprocessing as its `preprocessor_config.json` describes it
//! (transformers' `CLIPImageProcessor`, `ViTImageProcessor`, `BitImageProcessor`, ...):
//! resize (to a fixed size, or the shortest edge to a length) with Pillow's filter, centre
//! crop, rescale to 0..1 and normalise by channel, giving the float tensor the model takes.

use super::pil_resize::{resize_pil, PilFilter};
use super::RgbImage;
use crate::{Error, Result, Tensor};
use serde_json::Value;
use std::path::Path;

/// How `resize` sizes the image.
#[derive(Clone, Debug, PartialEq)]
pub enum ResizeTo {
    /// Exactly `height` x `width`.
    Exact { height: usize, width: usize },
    /// The shorter side to `len`, the other keeping the aspect ratio (rounded down).
    ShortestEdge(usize),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ImageProcessor {
    pub resize: Option<(ResizeTo, PilFilter)>,
    /// (height, width) taken from the centre.
    pub crop: Option<(usize, usize)>,
    /// Multiplies the 8-bit values (1/255 usually).
    pub rescale: Option<f64>,
    /// Per channel (mean, std).
    pub normalize: Option<([f32; 3], [f32; 3])>,
}

const FILE: &str = "preprocessor_config.json";

fn bad(msg: String) -> Error {
    Error::format("preprocessor_config.json", msg)
}

/// A size given as `{"height", "width"}`, `{"shortest_edge"}` or a bare number (square).
fn read_size(v: &Value, key: &str) -> Result<ResizeTo> {
    let dim = |x: &Value, what: &str| -> Result<usize> {
        x.as_u64()
            .filter(|&n| n > 0 && n <= 1 << 16)
            .map(|n| n as usize)
            .ok_or_else(|| bad(format!("`{key}.{what}` must be a size, got {x}")))
    };
    match v {
        Value::Number(_) => {
            let n = dim(v, "")?;
            Ok(ResizeTo::Exact {
                height: n,
                width: n,
            })
        }
        Value::Object(m) if m.contains_key("longest_edge") || m.contains_key("max_height") => {
            Err(bad(format!(
                "`{key}` {v}: longest_edge and max_height/max_width are not supported"
            )))
        }
        Value::Object(m) => match (m.get("height"), m.get("width"), m.get("shortest_edge")) {
            (Some(h), Some(w), _) => Ok(ResizeTo::Exact {
                height: dim(h, "height")?,
                width: dim(w, "width")?,
            }),
            (_, _, Some(s)) => Ok(ResizeTo::ShortestEdge(dim(s, "shortest_edge")?)),
            _ => Err(bad(format!(
                "`{key}` must have height and width, or shortest_edge; got {v}"
            ))),
        },
        _ => Err(bad(format!("`{key}` must be a size, got {v}"))),
    }
}

fn triple(v: &Value, key: &str) -> Result<[f32; 3]> {
    let nums: Vec<f32> = match v {
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_f64)
            .map(|x| x as f32)
            .collect(),
        Value::Number(n) => vec![n.as_f64().unwrap_or(0.0) as f32; 3],
        _ => Vec::new(),
    };
    match nums[..] {
        [a, b, c] => Ok([a, b, c]),
        _ => Err(bad(format!("`{key}` must be 3 numbers, got {v}"))),
    }
}

impl ImageProcessor {
    /// `preprocessor_config.json` as transformers' image processors read it back (the same
    /// steps; `image_processor_type` names the plain ViT processor, which applies them).
    pub fn to_json(&self) -> Value {
        let size = |r: &ResizeTo| match r {
            ResizeTo::Exact { height, width } => {
                serde_json::json!({"height": height, "width": width})
            }
            ResizeTo::ShortestEdge(s) => serde_json::json!({"shortest_edge": s}),
        };
        let mut v = serde_json::json!({
            "image_processor_type": "ViTImageProcessor",
            "do_resize": self.resize.is_some(),
            "do_center_crop": self.crop.is_some(),
            "do_rescale": self.rescale.is_some(),
            "do_normalize": self.normalize.is_some(),
        });
        let m = v.as_object_mut().expect("an object");
        if let Some((to, filter)) = &self.resize {
            m.insert("size".into(), size(to));
            m.insert("resample".into(), filter.code().into());
        }
        if let Some((height, width)) = self.crop {
            m.insert(
                "crop_size".into(),
                serde_json::json!({"height": height, "width": width}),
            );
        }
        if let Some(r) = self.rescale {
            m.insert("rescale_factor".into(), r.into());
        }
        if let Some((mean, std)) = self.normalize {
            m.insert("image_mean".into(), serde_json::json!(mean));
            m.insert("image_std".into(), serde_json::json!(std));
        }
        v
    }

    pub fn from_json(v: &Value) -> Result<ImageProcessor> {
        let flag =
            |key: &str, default: bool| v.get(key).and_then(Value::as_bool).unwrap_or(default);
        let resize = match flag("do_resize", true) {
            false => None,
            true => {
                let size = v
                    .get("size")
                    .ok_or_else(|| bad("do_resize without a `size`".into()))?;
                let code = v.get("resample").and_then(Value::as_u64).unwrap_or(2);
                let filter = PilFilter::from_code(code).ok_or_else(|| {
                    bad(format!(
                        "resample {code} is not supported (1 Lanczos, 2 bilinear or 3 bicubic)"
                    ))
                })?;
                Some((read_size(size, "size")?, filter))
            }
        };
        let crop = match flag("do_center_crop", false) {
            false => None,
            true => match read_size(
                v.get("crop_size")
                    .ok_or_else(|| bad("do_center_crop without a `crop_size`".into()))?,
                "crop_size",
            )? {
                ResizeTo::Exact { height, width } => Some((height, width)),
                ResizeTo::ShortestEdge(_) => {
                    return Err(bad("crop_size must be a height and width".into()))
                }
            },
        };
        let rescale = match flag("do_rescale", true) {
            false => None,
            true => Some(
                v.get("rescale_factor")
                    .and_then(Value::as_f64)
                    .unwrap_or(1.0 / 255.0),
            ),
        };
        let normalize = match flag("do_normalize", true) {
            false => None,
            true => {
                let (mean, std) = (v.get("image_mean"), v.get("image_std"));
                let (Some(mean), Some(std)) = (mean, std) else {
                    return Err(bad("do_normalize without image_mean and image_std".into()));
                };
                let std = triple(std, "image_std")?;
                if std.contains(&0.0) {
                    return Err(bad("image_std has a zero".into()));
                }
                Some((triple(mean, "image_mean")?, std))
            }
        };
        Ok(ImageProcessor {
            resize,
            crop,
            rescale,
            normalize,
        })
    }

    /// The folder's `preprocessor_config.json`, or `None` without one.
    pub fn from_folder(dir: &Path) -> Result<Option<ImageProcessor>> {
        let path = dir.join(FILE);
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("{}: {e}", path.display())))?;
        ImageProcessor::from_json(&v)
            .map(Some)
            .map_err(|e| Error::format("image processor", format!("{}: {e}", path.display())))
    }

    /// The 8-bit image after resize and crop.
    pub fn resized(&self, img: &RgbImage) -> RgbImage {
        let (w, h) = (img.width() as usize, img.height() as usize);
        let mut out = match &self.resize {
            None => img.clone(),
            Some((to, filter)) => {
                let (nh, nw) = match *to {
                    ResizeTo::Exact { height, width } => (height, width),
                    ResizeTo::ShortestEdge(s) => {
                        let (short, long) = (w.min(h), w.max(h));
                        let long_out = (s as f64 * long as f64 / short.max(1) as f64) as usize;
                        if w <= h {
                            (long_out, s)
                        } else {
                            (s, long_out)
                        }
                    }
                };
                resize_pil(img, nw.max(1), nh.max(1), *filter)
            }
        };
        if let Some((ch, cw)) = self.crop {
            out = center_crop(&out, ch, cw);
        }
        out
    }

    /// An RGB image → the model's input [3, H, W] (F32).
    pub fn apply(&self, img: &RgbImage) -> Result<Tensor> {
        let img = self.resized(img);
        let (w, h) = (img.width() as usize, img.height() as usize);
        let raw = img.as_raw();
        let mut out = vec![0f32; 3 * h * w];
        for c in 0..3 {
            for i in 0..h * w {
                // As transformers: the rescale in f64 then to f32, the normalisation in f32.
                let mut x = match self.rescale {
                    Some(s) => (raw[i * 3 + c] as f64 * s) as f32,
                    None => raw[i * 3 + c] as f32,
                };
                if let Some((mean, std)) = &self.normalize {
                    x = (x - mean[c]) / std[c];
                }
                out[c * h * w + i] = x;
            }
        }
        Tensor::from_vec(out, &[3, h, w])
    }

    /// Images → a batch [N, 3, H, W]; every image must come out the same size (a config
    /// without a fixed output size and images of different sizes cannot batch).
    pub fn batch(&self, images: &[RgbImage]) -> Result<Tensor> {
        let items = images
            .iter()
            .map(|i| self.apply(i))
            .collect::<Result<Vec<_>>>()?;
        if let Some(first) = items.first() {
            if let Some(other) = items.iter().find(|t| t.shape() != first.shape()) {
                return Err(Error::invalid(
                    "image processor",
                    format!(
                        "images come out as {:?} and {:?}: without a crop or an exact size they cannot batch",
                        first.shape(),
                        other.shape()
                    ),
                ));
            }
        }
        Tensor::stack(&items, 0)
    }
}

/// transformers' `center_crop`: the centre `ch` x `cw` (top-left rounded down), zero-padded
/// around when the image is smaller. (transformers pads first, with the image's top-left at
/// the rounded-up half of the excess; both offsets cancel to this floor division.)
fn center_crop(img: &RgbImage, ch: usize, cw: usize) -> RgbImage {
    let (w, h) = (img.width() as i64, img.height() as i64);
    let top = (h - ch as i64).div_euclid(2);
    let left = (w - cw as i64).div_euclid(2);
    RgbImage::from_fn(cw as u32, ch as u32, |x, y| {
        let (sy, sx) = (top + y as i64, left + x as i64);
        if (0..h).contains(&sy) && (0..w).contains(&sx) {
            *img.get_pixel(sx as u32, sy as u32)
        } else {
            ::image::Rgb([0, 0, 0])
        }
    })
}
