//! A YOLO detection split: its image files and their label files, checked as ultralytics'
//! `get_img_files`, `img2label_paths` and `verify_image_label` (8.4.190) do.
//!
//! Images: a folder is searched recursively for `*.*` (hidden names skipped, as Python's glob
//! does); a `.txt` file lists one image per line (UTF-8, BOM allowed; `./x` is relative to the
//! list's folder, other relative lines to the current directory). Paths whose suffix is an
//! ultralytics image format are kept and sorted as strings. We decode only JPEG and PNG, so other
//! formats are dropped like corrupt images, with a warning that says so.
//!
//! Labels: the last `/images/` of the image path becomes `/labels/` and the extension `.txt`.
//! A missing or empty label file makes a background image. Otherwise each non-blank line is
//! `class cx cy w h` (normalised), or a polygon `class x1 y1 x2 y2 ...` (more than 6 fields),
//! which becomes its bounding box. The image is dropped, with a warning naming it and the
//! reason, when: the image is unreadable or under 10 pixels a side; rows mix polygons and
//! boxes; a box row does not have 5 fields; a field is not a number; a coordinate exceeds 1.01;
//! a value is negative (down to -0.01 is tolerated when no width or height is negative);
//! a class is not an integer or not below the class count. Duplicate rows are removed (with a
//! warning; the rows then come out sorted, as `np.unique` leaves them).

use super::config::DataConfig;
use super::label_rows::{check_rows, dedupe, read_rows};
use crate::vision::image::image_size;
use crate::{Error, Result};
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// Image suffixes ultralytics accepts (`IMG_FORMATS`).
pub const IMG_FORMATS: [&str; 13] = [
    "avif", "bmp", "dng", "heic", "heif", "jp2", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp",
];

/// One object: class index and normalised centre x, centre y, width, height.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct YoloBox {
    pub class: usize,
    pub xywh: [f32; 4],
}

/// An image of the split with its (possibly empty) labels.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageEntry {
    pub path: PathBuf,
    pub label_path: PathBuf,
    pub labels: Vec<YoloBox>,
    /// (width, height) as decoded (EXIF orientation applied).
    pub size: (usize, usize),
}

/// How the label files were found: ultralytics' `nf`, `nm`, `ne`, `nc`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LabelCounts {
    pub found: usize,
    pub missing: usize,
    pub empty: usize,
    pub corrupt: usize,
}

/// The images of one split, their labels, class names, and what was dropped or fixed.
#[derive(Clone, Debug)]
pub struct YoloDataset {
    pub images: Vec<ImageEntry>,
    pub names: Vec<String>,
    pub warnings: Vec<String>,
    pub counts: LabelCounts,
}

impl YoloDataset {
    /// The images and labels of split `split` (`train`, `val` or `test`) of a dataset YAML.
    pub fn load(config: &DataConfig, split: &str) -> Result<YoloDataset> {
        Self::from_paths(config.split(split)?, config.names.clone())
    }

    /// The images and labels found from folders, image files or `.txt` lists.
    pub fn from_paths(paths: &[PathBuf], names: Vec<String>) -> Result<YoloDataset> {
        let files = image_files(paths)?;
        let checked: Vec<Checked> = files
            .par_iter()
            .map(|f| verify_image_label(f, &label_path(f), names.len()))
            .collect();
        let mut images = Vec::new();
        let mut warnings = Vec::new();
        let mut counts = LabelCounts::default();
        for c in checked {
            counts.found += c.counts.found;
            counts.missing += c.counts.missing;
            counts.empty += c.counts.empty;
            counts.corrupt += c.counts.corrupt;
            warnings.extend(c.warning);
            images.extend(c.entry);
        }
        if counts.found == 0 {
            warnings.push(format!("No labels found for {}", show(paths)));
        }
        if images.is_empty() {
            return Err(Error::format(
                "yolo dataset",
                format!(
                    "no valid images in {}: {}",
                    show(paths),
                    warnings.join("; ")
                ),
            ));
        }
        Ok(YoloDataset {
            images,
            names,
            warnings,
            counts,
        })
    }

    /// ultralytics' scan line: "N images, M backgrounds, K corrupt".
    pub fn summary(&self) -> String {
        let c = &self.counts;
        format!(
            "{} images, {} backgrounds, {} corrupt",
            c.found,
            c.missing + c.empty,
            c.corrupt
        )
    }
}

fn show(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `get_img_files`: the sorted image paths under folders, in `.txt` lists, or given directly.
pub fn image_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut found: Vec<String> = Vec::new();
    for p in paths {
        if p.is_dir() {
            refuse_system_folder(p)?;
            Walk::new(p).run(p, &mut found, 0)?;
        } else if p.is_file() {
            let bytes = std::fs::read(p).map_err(|e| Error::io(p, e))?;
            let text = String::from_utf8(bytes).map_err(|_| {
                Error::format("yolo dataset", format!("{}: not UTF-8 text", p.display()))
            })?;
            let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
            let parent = format!(
                "{}{}",
                p.parent().unwrap_or(Path::new("")).display(),
                std::path::MAIN_SEPARATOR
            );
            for line in text.trim().lines() {
                found.push(match line.strip_prefix("./") {
                    Some(rest) => format!("{parent}{rest}"),
                    None => line.to_string(),
                });
            }
        } else {
            return Err(Error::format(
                "yolo dataset",
                format!("{} does not exist", p.display()),
            ));
        }
    }
    let mut images: Vec<String> = found.into_iter().filter(|f| has_image_suffix(f)).collect();
    images.sort();
    if images.is_empty() {
        return Err(Error::format(
            "yolo dataset",
            format!(
                "no images found in {} (image suffixes: {})",
                show(paths),
                IMG_FORMATS.join(", ")
            ),
        ));
    }
    Ok(images.into_iter().map(PathBuf::from).collect())
}

/// The text after the last `.` of the whole path, lower-cased, is an image format.
fn has_image_suffix(path: &str) -> bool {
    path.rsplit_once('.')
        .is_some_and(|(_, ext)| IMG_FORMATS.contains(&ext.to_ascii_lowercase().as_str()))
}

/// A split that resolves to the file system's root or to a kernel's folder (`/proc`, `/sys`,
/// `/dev`) is a mistake (or a hostile file), and walking it would not end soon.
fn refuse_system_folder(p: &Path) -> Result<()> {
    let Ok(real) = std::fs::canonicalize(p) else {
        return Ok(());
    };
    if is_system_folder(&real) {
        return Err(Error::format(
            "yolo dataset",
            format!(
                "{} is {}, a system folder, not a dataset's images",
                p.display(),
                real.display()
            ),
        ));
    }
    Ok(())
}

/// The file system's root, or a folder of the kernel's (`/proc`, `/sys`, `/dev`; not
/// `/dev/shm`, where datasets are put for speed).
fn is_system_folder(real: &Path) -> bool {
    real.parent().is_none()
        || ["/proc", "/sys"].iter().any(|s| real.starts_with(s))
        || (real.starts_with("/dev") && !real.starts_with("/dev/shm"))
}

/// Entries a split's folder may hold before the walk stops.
const MAX_ENTRIES: usize = 10_000_000;

/// `glob(dir/**/*.*, recursive=True)`: files and folders whose name has a dot, hidden names
/// skipped. Linked folders are followed, as Python's glob follows them, except into a system
/// folder; each real folder is walked once (a link back up ends there), and depth and entries
/// are bounded, so a split holding a link to `/` or `/proc/self` ends instead of walking forever.
struct Walk {
    seen: std::collections::HashSet<PathBuf>,
    entries: usize,
    top: PathBuf,
}

impl Walk {
    fn new(top: &Path) -> Walk {
        Walk {
            seen: std::collections::HashSet::new(),
            entries: 0,
            top: top.to_path_buf(),
        }
    }

    fn run(&mut self, dir: &Path, out: &mut Vec<String>, depth: usize) -> Result<()> {
        let Ok(real) = std::fs::canonicalize(dir) else {
            return Ok(());
        };
        if is_system_folder(&real) || !self.seen.insert(real) {
            return Ok(());
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                return Err(Error::format(
                    "yolo dataset",
                    format!(
                        "{} holds more than {MAX_ENTRIES} files and folders; does the split point \
                         at the dataset's images?",
                        self.top.display()
                    ),
                ));
            }
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') {
                continue;
            }
            let path = entry.path();
            if name.contains('.') {
                out.push(path.to_string_lossy().into_owned());
            }
            if depth < 64 && path.is_dir() {
                self.run(&path, out, depth + 1)?;
            }
        }
        Ok(())
    }
}

/// `img2label_paths`: the last `/images/` becomes `/labels/`, the extension `.txt`.
pub fn label_path(image: &Path) -> PathBuf {
    let sep = std::path::MAIN_SEPARATOR;
    let s = image.to_string_lossy();
    let images = format!("{sep}images{sep}");
    let swapped = match s.rfind(&images) {
        Some(i) => format!("{}{sep}labels{sep}{}", &s[..i], &s[i + images.len()..]),
        None => s.into_owned(),
    };
    let stem = swapped
        .rsplit_once('.')
        .map_or(swapped.as_str(), |(stem, _)| stem);
    PathBuf::from(format!("{stem}.txt"))
}

/// One image's verdict; `counts` holds its 0/1 contributions, as ultralytics counts them (an
/// empty label file counts as found and empty, a bad one as found and corrupt).
pub(crate) struct Checked {
    entry: Option<ImageEntry>,
    counts: LabelCounts,
    warning: Option<String>,
}

/// `verify_image_label` for a detection dataset with `num_classes` classes.
pub(crate) fn verify_image_label(image: &Path, label_file: &Path, num_classes: usize) -> Checked {
    let corrupt = |found, reason: String| Checked {
        entry: None,
        counts: LabelCounts {
            found,
            corrupt: 1,
            ..Default::default()
        },
        warning: Some(format!(
            "{}: ignoring corrupt image/label: {reason}",
            image.display()
        )),
    };
    let size = match check_image(image) {
        Ok(s) => s,
        Err(reason) => return corrupt(0, reason),
    };
    if !label_file.is_file() {
        let entry = ImageEntry {
            path: image.into(),
            label_path: label_file.into(),
            labels: Vec::new(),
            size,
        };
        let counts = LabelCounts {
            missing: 1,
            ..Default::default()
        };
        return Checked {
            entry: Some(entry),
            counts,
            warning: None,
        };
    }
    let rows = match read_rows(label_file).and_then(|rows| check_rows(rows, num_classes)) {
        Ok(rows) => rows,
        Err(reason) => return corrupt(1, reason),
    };
    let (rows, removed) = dedupe(rows);
    let warning =
        (removed > 0).then(|| format!("{}: {removed} duplicate labels removed", image.display()));
    let counts = LabelCounts {
        found: 1,
        empty: rows.is_empty() as usize,
        ..Default::default()
    };
    let labels = rows
        .iter()
        .map(|r| YoloBox {
            class: r.values[0] as usize,
            xywh: [r.values[1], r.values[2], r.values[3], r.values[4]],
        })
        .collect();
    let entry = ImageEntry {
        path: image.into(),
        label_path: label_file.into(),
        labels,
        size,
    };
    Checked {
        entry: Some(entry),
        counts,
        warning,
    }
}

/// `check_image`: a JPEG or PNG whose header gives at least 10x10 pixels.
fn check_image(image: &Path) -> std::result::Result<(usize, usize), String> {
    let mut head = [0u8; 16];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(image).map_err(|e| e.to_string())?;
        let n = f.read(&mut head).map_err(|e| e.to_string())?;
        match ::image::guess_format(&head[..n]) {
            Ok(::image::ImageFormat::Jpeg | ::image::ImageFormat::Png) => {}
            Ok(other) => {
                return Err(format!(
                    "image format {other:?} is not supported (only JPEG and PNG)"
                ))
            }
            Err(_) => return Err("not a recognised image format".into()),
        }
    }
    let (w, h) = image_size(image).map_err(|e| e.to_string())?;
    if w < 10 || h < 10 {
        return Err(format!("image size ({h}, {w}) <10 pixels"));
    }
    Ok((w, h))
}
