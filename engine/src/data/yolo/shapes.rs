//! A synthetic detection dataset in ultralytics' layout, for training and validating YOLO
//! models without downloads: `images/{train,val}/*.jpg`, `labels/{train,val}/*.txt` and a
//! `data.yaml` naming the classes.
//!
//! Each image (long side `imgsz`, short side 60-100% of it) has a textured background (noise,
//! a gradient or stripes, with noise on top) and 1-6 filled shapes of random colour and size,
//! some overlapping (a new shape may cover up to a third of an earlier one's box). A label box
//! is the exact pixel extent of its shape as drawn (a later shape may cover part of it, as
//! occluded objects keep their full box in real datasets). Every image depends only on the seed, the
//! split and its index, so a dataset is the same for a seed however many threads make it.

use crate::{Error, Result};
use image::{Rgb, RgbImage};
use rayon::prelude::*;
use std::path::Path;

/// The shapes the generator can draw; a dataset's classes are a list of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeKind {
    Circle,
    Square,
    Triangle,
    Cross,
    Diamond,
    Ring,
}

impl ShapeKind {
    pub const ALL: [ShapeKind; 6] = [
        ShapeKind::Circle,
        ShapeKind::Square,
        ShapeKind::Triangle,
        ShapeKind::Cross,
        ShapeKind::Diamond,
        ShapeKind::Ring,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ShapeKind::Circle => "circle",
            ShapeKind::Square => "square",
            ShapeKind::Triangle => "triangle",
            ShapeKind::Cross => "cross",
            ShapeKind::Diamond => "diamond",
            ShapeKind::Ring => "ring",
        }
    }

    /// Whether the point (u, v), in units of the half-size around the centre (so the shape's
    /// box is [-1, 1]²), is inside the shape.
    fn contains(self, u: f64, v: f64) -> bool {
        match self {
            ShapeKind::Circle => u * u + v * v <= 1.0,
            ShapeKind::Square => u.abs() <= 1.0 && v.abs() <= 1.0,
            // apex at the top, base at the bottom
            ShapeKind::Triangle => v <= 1.0 && u.abs() <= (v + 1.0) / 2.0,
            ShapeKind::Cross => {
                (u.abs() <= 1.0 && v.abs() <= 0.3) || (u.abs() <= 0.3 && v.abs() <= 1.0)
            }
            ShapeKind::Diamond => u.abs() + v.abs() <= 1.0,
            ShapeKind::Ring => (0.45..=1.0).contains(&(u * u + v * v).sqrt()),
        }
    }
}

/// What to generate.
#[derive(Clone, Debug)]
pub struct ShapesOptions {
    pub train: usize,
    pub val: usize,
    /// The long side of every image.
    pub imgsz: usize,
    pub seed: u64,
    /// The classes, in label order.
    pub classes: Vec<ShapeKind>,
}

impl Default for ShapesOptions {
    fn default() -> Self {
        ShapesOptions {
            train: 256,
            val: 64,
            imgsz: 320,
            seed: 0,
            classes: ShapeKind::ALL.to_vec(),
        }
    }
}

/// Writes the dataset under `dir` and returns the path of its `data.yaml`.
pub fn generate_shapes(dir: impl AsRef<Path>, opts: &ShapesOptions) -> Result<std::path::PathBuf> {
    let dir = dir.as_ref();
    if opts.classes.is_empty() {
        return Err(Error::invalid(
            "generate_shapes",
            "at least one class is needed",
        ));
    }
    if opts.imgsz < 32 {
        return Err(Error::invalid(
            "generate_shapes",
            format!("imgsz {} is below 32", opts.imgsz),
        ));
    }
    for (split, count, split_id) in [("train", opts.train, 1u64), ("val", opts.val, 2u64)] {
        let images = dir.join("images").join(split);
        let labels = dir.join("labels").join(split);
        for d in [&images, &labels] {
            std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
        }
        (0..count).into_par_iter().try_for_each(|i| {
            let (img, boxes) = sample(opts, split_id, i);
            let stem = format!("{split}_{i:05}");
            let img_path = images.join(format!("{stem}.jpg"));
            let file = std::fs::File::create(&img_path).map_err(|e| Error::io(&img_path, e))?;
            let mut out = std::io::BufWriter::new(file);
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
                .encode_image(&img)
                .map_err(|e| Error::format("jpeg", format!("{}: {e}", img_path.display())))?;
            let text: String = boxes
                .iter()
                .map(|b| {
                    format!(
                        "{} {:.6} {:.6} {:.6} {:.6}\n",
                        b.0, b.1[0], b.1[1], b.1[2], b.1[3]
                    )
                })
                .collect();
            let label_path = labels.join(format!("{stem}.txt"));
            std::fs::write(&label_path, text).map_err(|e| Error::io(&label_path, e))
        })?;
    }
    let names: String = opts
        .classes
        .iter()
        .enumerate()
        .map(|(i, c)| format!("  {i}: {}\n", c.name()))
        .collect();
    let yaml = format!(
        "# Synthetic shapes (rusting_brain generate_shapes, seed {})\ntrain: images/train\nval: images/val\nnames:\n{names}",
        opts.seed
    );
    let yaml_path = dir.join("data.yaml");
    std::fs::write(&yaml_path, yaml).map_err(|e| Error::io(&yaml_path, e))?;
    Ok(yaml_path)
}

/// Image `i` of a split (1 train, 2 val) and its labels: (class, normalised [cx, cy, w, h]).
pub(crate) fn sample(
    opts: &ShapesOptions,
    split_id: u64,
    i: usize,
) -> (RgbImage, Vec<(usize, [f64; 4])>) {
    let mut rng =
        SplitMix64::new(opts.seed ^ (split_id << 56) ^ (i as u64).wrapping_mul(0x9E37_79B9));
    draw_sample(&mut rng, opts)
}

fn draw_sample(rng: &mut SplitMix64, opts: &ShapesOptions) -> (RgbImage, Vec<(usize, [f64; 4])>) {
    let long = opts.imgsz;
    let short = (long as f64 * rng.range(0.6, 1.0)).round() as usize;
    let (w, h) = if rng.next_f64() < 0.5 {
        (long, short)
    } else {
        (short, long)
    };
    let mut img = background(rng, w, h);
    let mut placed: Vec<[usize; 4]> = Vec::new();
    let mut labels = Vec::new();
    let count = 1 + (rng.next_u64() % 6) as usize;
    for _ in 0..count {
        // A few tries to find a spot that hides at most a third of any earlier box.
        for _attempt in 0..20 {
            let size = rng.range(0.08, 0.4) * w.min(h) as f64;
            let aspect = rng.range(0.7, 1.4);
            let (hw, hh) = (size * aspect.sqrt() / 2.0, size / aspect.sqrt() / 2.0);
            let cx = rng.range(hw + 1.0, w as f64 - hw - 1.0);
            let cy = rng.range(hh + 1.0, h as f64 - hh - 1.0);
            let kind_index = (rng.next_u64() % opts.classes.len() as u64) as usize;
            let kind = opts.classes[kind_index];
            let bbox = [
                (cx - hw).floor() as usize,
                (cy - hh).floor() as usize,
                (cx + hw).ceil() as usize,
                (cy + hh).ceil() as usize,
            ];
            if placed
                .iter()
                .any(|p| overlap_fraction(p, &bbox) > 1.0 / 3.0)
            {
                continue;
            }
            let colour = contrasting_colour(rng, &img, &bbox);
            if let Some(extent) = fill_shape(&mut img, kind, cx, cy, hw, hh, colour) {
                placed.push(extent);
                let [x0, y0, x1, y1] = extent.map(|v| v as f64);
                let (wf, hf) = (w as f64, h as f64);
                labels.push((
                    kind_index,
                    [
                        (x0 + x1) / 2.0 / wf,
                        (y0 + y1) / 2.0 / hf,
                        (x1 - x0) / wf,
                        (y1 - y0) / hf,
                    ],
                ));
            }
            break;
        }
    }
    (img, labels)
}

/// The fraction of `earlier`'s area that `new` covers.
fn overlap_fraction(earlier: &[usize; 4], new: &[usize; 4]) -> f64 {
    let iw = earlier[2]
        .min(new[2])
        .saturating_sub(earlier[0].max(new[0]));
    let ih = earlier[3]
        .min(new[3])
        .saturating_sub(earlier[1].max(new[1]));
    let area = ((earlier[2] - earlier[0]) * (earlier[3] - earlier[1])).max(1);
    (iw * ih) as f64 / area as f64
}

/// Fills the shape's pixels (tested at pixel centres) and returns its exact pixel extent
/// [x0, y0, x1, y1) (None if no pixel was inside).
fn fill_shape(
    img: &mut RgbImage,
    kind: ShapeKind,
    cx: f64,
    cy: f64,
    hw: f64,
    hh: f64,
    colour: [u8; 3],
) -> Option<[usize; 4]> {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let (x_lo, x_hi) = (
        ((cx - hw).floor().max(0.0)) as usize,
        ((cx + hw).ceil() as usize).min(w),
    );
    let (y_lo, y_hi) = (
        ((cy - hh).floor().max(0.0)) as usize,
        ((cy + hh).ceil() as usize).min(h),
    );
    let mut extent: Option<[usize; 4]> = None;
    for y in y_lo..y_hi {
        for x in x_lo..x_hi {
            let (u, v) = ((x as f64 + 0.5 - cx) / hw, (y as f64 + 0.5 - cy) / hh);
            if kind.contains(u, v) {
                img.put_pixel(x as u32, y as u32, Rgb(colour));
                let e = extent.get_or_insert([x, y, x + 1, y + 1]);
                *e = [e[0].min(x), e[1].min(y), e[2].max(x + 1), e[3].max(y + 1)];
            }
        }
    }
    extent
}

/// A random colour at least 120 (sum of channel differences) away from the box's mean colour.
fn contrasting_colour(rng: &mut SplitMix64, img: &RgbImage, b: &[usize; 4]) -> [u8; 3] {
    let mut mean = [0f64; 3];
    let mut n = 0.0f64;
    for y in (b[1]..b[3].min(img.height() as usize)).step_by(3) {
        for x in (b[0]..b[2].min(img.width() as usize)).step_by(3) {
            let p = img.get_pixel(x as u32, y as u32).0;
            for c in 0..3 {
                mean[c] += p[c] as f64;
            }
            n += 1.0;
        }
    }
    let mean = mean.map(|m| m / n.max(1.0));
    let mut best = [0u8; 3];
    for _ in 0..16 {
        let c = [
            rng.next_u64() as u8,
            rng.next_u64() as u8,
            rng.next_u64() as u8,
        ];
        if (0..3).map(|i| (c[i] as f64 - mean[i]).abs()).sum::<f64>() >= 120.0 {
            return c;
        }
        best = c.map(|v| if v < 128 { 255 - v } else { v });
    }
    best
}

/// Noise, a gradient, or stripes between two random colours, with pixel noise on top.
fn background(rng: &mut SplitMix64, w: usize, h: usize) -> RgbImage {
    let a = [
        rng.next_u64() as u8,
        rng.next_u64() as u8,
        rng.next_u64() as u8,
    ]
    .map(|v| v as f64);
    let b = [
        rng.next_u64() as u8,
        rng.next_u64() as u8,
        rng.next_u64() as u8,
    ]
    .map(|v| v as f64);
    let style = rng.next_u64() % 3;
    let angle = rng.range(0.0, std::f64::consts::PI);
    let (dx, dy) = (angle.cos(), angle.sin());
    let period = rng.range(8.0, 40.0);
    let noise = rng.range(5.0, 40.0);
    let mut img = RgbImage::new(w as u32, h as u32);
    for (x, y, p) in img.enumerate_pixels_mut() {
        let t = match style {
            0 => 0.5,
            1 => ((x as f64 * dx + y as f64 * dy) / (w + h) as f64).clamp(0.0, 1.0),
            _ => (((x as f64 * dx + y as f64 * dy) / period).floor() as i64).rem_euclid(2) as f64,
        };
        let jitter = (rng.next_f64() - 0.5) * 2.0 * noise;
        p.0 = [0, 1, 2].map(|c| (a[c] + (b[c] - a[c]) * t + jitter).clamp(0.0, 255.0) as u8);
    }
    img
}

/// SplitMix64: a small, fast, well-mixed generator; one per image keeps images independent of
/// the order threads make them in.
struct SplitMix64(u64);

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }
}
