//! The model YAML of ultralytics (`yolo11.yaml`, `yolov8.yaml`): scales, backbone and head
//! rows `[from, repeats, module, args]`. The same tree comes from a `.yaml` file, from a `.pt`
//! checkpoint's `yaml` attribute or from a safetensors file's metadata, so parsing starts from
//! a `yaml_rust2::Yaml` value.

use crate::{Error, Result};
use yaml_rust2::Yaml;

/// One row of the backbone or head.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSpec {
    /// Earlier layers this one reads: negative values count back from this layer.
    pub from: Vec<i64>,
    pub repeats: usize,
    pub module: String,
    pub args: Vec<Yaml>,
}

/// A parsed model definition, with one scale chosen.
#[derive(Clone, Debug, PartialEq)]
pub struct YoloConfig {
    pub nc: usize,
    pub reg_max: usize,
    /// The scale letter (n, s, m, l, x) when the file has `scales`.
    pub scale: Option<String>,
    pub depth: f64,
    pub width: f64,
    pub max_channels: usize,
    pub layers: Vec<LayerSpec>,
    /// The tree this came from, with `scale` and `nc` set, so a save can write it back.
    pub source: Yaml,
}

fn bad(what: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid("yolo config", format!("{what}: {msg}"))
}

fn number(v: &Yaml) -> Option<f64> {
    match v {
        Yaml::Integer(i) => Some(*i as f64),
        Yaml::Real(r) => r.parse().ok(),
        _ => None,
    }
}

impl YoloConfig {
    /// Parses YAML text. `scale` picks the row of `scales` (else the file's own `scale` key,
    /// else the first row, as ultralytics does); `nc` overrides the class count.
    pub fn from_yaml_str(
        text: &str,
        origin: &str,
        scale: Option<&str>,
        nc: Option<usize>,
    ) -> Result<YoloConfig> {
        let docs = crate::io::yaml::parse_untrusted(text).map_err(|e| bad(origin, e))?;
        let doc = docs
            .into_iter()
            .next()
            .ok_or_else(|| bad(origin, "the file is empty"))?;
        Self::from_yaml(doc, origin, scale, nc)
    }

    /// Reads a model YAML file. The scale comes from a letter after the family name
    /// (`yolo11n.yaml` is `yolo11.yaml` at scale n), when that file exists instead.
    /// A name that is not a file (`yolo11n.yaml`) resolves to the built-in definitions.
    pub fn from_file(path: &std::path::Path, nc: Option<usize>) -> Result<YoloConfig> {
        let origin = path.display().to_string();
        let (path, scale) = resolve_scaled_path(path);
        if !path.is_file() {
            if let Some(builtin) = super::definitions::builtin(&origin, nc) {
                return builtin;
            }
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| bad(&path.display().to_string(), e))?;
        Self::from_yaml_str(&text, &origin, scale.as_deref(), nc)
    }

    pub fn from_yaml(
        mut doc: Yaml,
        origin: &str,
        scale: Option<&str>,
        nc: Option<usize>,
    ) -> Result<YoloConfig> {
        if !matches!(doc, Yaml::Hash(_)) {
            return Err(bad(origin, "the model definition must be a mapping"));
        }
        let file_nc = match &doc["nc"] {
            Yaml::BadValue | Yaml::Null => None,
            v => Some(
                v.as_i64()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad(origin, "`nc` must be a positive integer"))?
                    as usize,
            ),
        };
        let nc = nc
            .or(file_nc)
            .ok_or_else(|| bad(origin, "missing key `nc` (number of classes)"))?;
        if nc > limits::CLASSES {
            return Err(bad(
                origin,
                format!("`nc` {nc} is more than {} classes", limits::CLASSES),
            ));
        }
        let reg_max = match &doc["reg_max"] {
            Yaml::BadValue => 16,
            v => v
                .as_i64()
                .filter(|r| (1..=limits::REG_MAX).contains(r))
                .ok_or_else(|| {
                    bad(
                        origin,
                        format!("`reg_max` must be an integer from 1 to {}", limits::REG_MAX),
                    )
                })? as usize,
        };
        // ultralytics stores `scale: ''` when it could not guess one, and then takes the first.
        let own_scale = doc["scale"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let scale = scale.filter(|s| !s.is_empty());
        let (scale, depth, width, max_channels) = match &doc["scales"] {
            Yaml::Hash(rows) => {
                let letter = scale
                    .map(str::to_string)
                    .or(own_scale)
                    .or_else(|| {
                        rows.keys()
                            .next()
                            .and_then(|k| k.as_str())
                            .map(str::to_string)
                    })
                    .ok_or_else(|| bad(origin, "`scales` is empty"))?;
                let row = rows.get(&Yaml::String(letter.clone())).ok_or_else(|| {
                    let known: Vec<&str> = rows.keys().filter_map(|k| k.as_str()).collect();
                    bad(
                        origin,
                        format!("no scale `{letter}` in `scales` (has {known:?})"),
                    )
                })?;
                let v: Vec<f64> = row
                    .as_vec()
                    .map(|r| r.iter().filter_map(number).collect())
                    .unwrap_or_default();
                if v.len() != 3 {
                    return Err(bad(
                        origin,
                        format!("scale `{letter}` must be [depth, width, max_channels]"),
                    ));
                }
                if !(1.0..=limits::CHANNELS as f64).contains(&v[2]) {
                    return Err(bad(
                        origin,
                        format!(
                            "scale `{letter}`: max_channels {} is not from 1 to {}",
                            v[2],
                            limits::CHANNELS
                        ),
                    ));
                }
                (Some(letter), v[0], v[1], v[2] as usize)
            }
            _ => (
                None,
                number(&doc["depth_multiple"]).unwrap_or(1.0),
                number(&doc["width_multiple"]).unwrap_or(1.0),
                usize::MAX,
            ),
        };
        for (what, m) in [("depth", depth), ("width", width)] {
            if !(m > 0.0 && m <= limits::MULTIPLE) {
                return Err(bad(
                    origin,
                    format!(
                        "the {what} multiple {m} is not above 0 and at most {}",
                        limits::MULTIPLE
                    ),
                ));
            }
        }
        let mut layers = Vec::new();
        for part in ["backbone", "head"] {
            let rows = doc[part]
                .as_vec()
                .ok_or_else(|| bad(origin, format!("missing key `{part}` (a list of layers)")))?;
            for row in rows {
                let i = layers.len();
                if i == limits::LAYERS {
                    return Err(bad(origin, format!("more than {} layers", limits::LAYERS)));
                }
                layers.push(parse_row(row).map_err(|m| bad(origin, format!("layer {i}: {m}")))?);
            }
        }
        if let Yaml::Hash(h) = &mut doc {
            h.insert(Yaml::String("nc".into()), Yaml::Integer(nc as i64));
            if let Some(s) = &scale {
                h.insert(Yaml::String("scale".into()), Yaml::String(s.clone()));
            }
        }
        Ok(YoloConfig {
            nc,
            reg_max,
            scale,
            depth,
            width,
            max_channels,
            layers,
            source: doc,
        })
    }

    /// The definition as YAML text (for metadata of saved weights).
    pub fn to_yaml_string(&self) -> String {
        let mut out = String::new();
        let mut emitter = yaml_rust2::YamlEmitter::new(&mut out);
        // Emitting a tree we parsed (strings, numbers, lists, maps) cannot fail.
        let _ = emitter.dump(&self.source);
        out
    }
}

/// Bounds on a definition's numbers, checked before anything is built: a definition sizes
/// allocations from them (a `.pt` or safetensors file carries its own), and no published model
/// comes near them (YOLO11x: repeats 2, width 1.5, 512 max channels, 24 layers).
mod limits {
    pub const REPEATS: i64 = 64;
    pub const CHANNELS: usize = 16384;
    pub const MULTIPLE: f64 = 4.0;
    pub const LAYERS: usize = 512;
    pub const CLASSES: usize = 100_000;
    pub const REG_MAX: i64 = 64;
}

fn parse_row(row: &Yaml) -> std::result::Result<LayerSpec, String> {
    let cols = row
        .as_vec()
        .filter(|c| c.len() == 4)
        .ok_or("must be [from, repeats, module, args]")?;
    let from = match &cols[0] {
        Yaml::Integer(i) => vec![*i],
        Yaml::Array(a) => a
            .iter()
            .map(|v| v.as_i64().ok_or("`from` entries must be integers"))
            .collect::<std::result::Result<_, _>>()?,
        _ => return Err("`from` must be an integer or a list of integers".into()),
    };
    if from.is_empty() {
        return Err("`from` names no layer".into());
    }
    let repeats = cols[1]
        .as_i64()
        .filter(|n| (1..=limits::REPEATS).contains(n))
        .ok_or_else(|| format!("`repeats` must be an integer from 1 to {}", limits::REPEATS))?
        as usize;
    let module = cols[2]
        .as_str()
        .ok_or("`module` must be a name")?
        .to_string();
    let args = cols[3].as_vec().cloned().ok_or("`args` must be a list")?;
    if let Some(big) = args
        .iter()
        .filter_map(Yaml::as_i64)
        .find(|v| v.unsigned_abs() > limits::CHANNELS as u64)
    {
        return Err(format!(
            "argument {big} is out of range: channels, kernels and strides are at most {}",
            limits::CHANNELS
        ));
    }
    Ok(LayerSpec {
        from,
        repeats,
        module,
        args,
    })
}

/// `yolo11n.yaml` -> (`yolo11.yaml`, Some("n")) when only the unscaled file exists.
fn resolve_scaled_path(path: &std::path::Path) -> (std::path::PathBuf, Option<String>) {
    if path.is_file() {
        return (path.to_path_buf(), scale_letter(path));
    }
    if let (Some(stem), Some(ext)) = (
        path.file_stem().and_then(|s| s.to_str()),
        path.extension().and_then(|s| s.to_str()),
    ) {
        if let Some(letter) = scale_letter(path) {
            let base = path.with_file_name(format!("{}.{ext}", &stem[..stem.len() - 1]));
            if base.is_file() {
                return (base, Some(letter));
            }
        }
    }
    (path.to_path_buf(), None)
}

/// The scale letter at the end of a model file's stem (`yolo11n` -> n), as ultralytics guesses.
fn scale_letter(path: &std::path::Path) -> Option<String> {
    let stem = path.file_stem()?.to_str()?;
    let last = stem.chars().last()?;
    let before = stem.chars().rev().nth(1)?;
    ("nsmlx".contains(last) && before.is_ascii_digit()).then(|| last.to_string())
}

/// Python's `round` (half to even), which ultralytics uses for the depth gain.
pub fn depth_gain(repeats: usize, depth: f64) -> usize {
    if repeats > 1 {
        ((repeats as f64 * depth).round_ties_even() as usize).max(1)
    } else {
        repeats
    }
}

/// The smallest multiple of `divisor` at or above `x`.
pub fn make_divisible(x: f64, divisor: usize) -> usize {
    (x / divisor as f64).ceil() as usize * divisor
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: &str = "
nc: 3
scales:
  n: [0.50, 0.25, 1024]
  s: [0.50, 0.50, 1024]
backbone:
  - [-1, 1, Conv, [64, 3, 2]]
  - [-1, 2, C3k2, [256, False, 0.25]]
head:
  - [[-1, 0], 1, Concat, [1]]
  - [[1, 2], 1, Detect, [nc]]
";

    #[test]
    fn config_takes_the_named_scale_row_and_reads_every_layer() {
        let c = YoloConfig::from_yaml_str(TINY, "tiny", Some("s"), None).unwrap();
        assert_eq!((c.nc, c.reg_max, c.depth, c.width), (3, 16, 0.5, 0.5));
        assert_eq!(c.scale.as_deref(), Some("s"));
        assert_eq!(c.layers.len(), 4);
        assert_eq!(c.layers[2].from, [-1, 0]);
        assert_eq!(c.layers[1].module, "C3k2");
        assert_eq!(c.layers[1].repeats, 2);
    }

    #[test]
    fn config_without_a_scale_takes_the_first_row_and_nc_can_be_overridden() {
        let c = YoloConfig::from_yaml_str(TINY, "tiny", None, Some(7)).unwrap();
        assert_eq!(c.scale.as_deref(), Some("n"));
        assert_eq!(c.nc, 7);
        assert!(c.to_yaml_string().contains("nc: 7"));
    }

    #[test]
    fn config_errors_name_the_missing_key_and_the_bad_layer() {
        let e = YoloConfig::from_yaml_str("nc: 2\nbackbone: []\n", "m.yaml", None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("m.yaml") && e.contains("`head`"), "{e}");
        let e = YoloConfig::from_yaml_str(TINY, "m.yaml", Some("q"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no scale `q`"), "{e}");
        let empty = TINY.replace("[[1, 2], 1, Detect", "[[], 1, Detect");
        let e = YoloConfig::from_yaml_str(&empty, "m.yaml", None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("layer 3") && e.contains("names no layer"), "{e}");
        let broken = TINY.replace("[-1, 2, C3k2", "[-1, 0, C3k2");
        let e = YoloConfig::from_yaml_str(&broken, "m.yaml", None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("layer 1") && e.contains("repeats"), "{e}");
    }

    /// A definition's numbers size the network's allocations: those no model has are refused
    /// before anything is built (a billion repeats, 2^63 - 1, a huge width or channel count).
    #[test]
    fn numbers_beyond_any_model_are_refused_before_building() {
        let cases = [
            (
                TINY.replace("[-1, 2, C3k2", "[-1, 1000000000, C3k2"),
                "repeats",
            ),
            (
                TINY.replace("[-1, 2, C3k2", "[-1, 9223372036854775807, C3k2"),
                "repeats",
            ),
            (
                TINY.replace("[-1, 2, C3k2", "[-1, 1099511627776, C3k2"),
                "repeats",
            ),
            (TINY.replace("nc: 3", "nc: 3000000"), "nc"),
        ];
        for (text, what) in &cases {
            let e = YoloConfig::from_yaml_str(text, "m.yaml", None, None)
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(e.contains(what), "{what}: {e}");
        }
        let wide = TINY.replacen("[64,", "[1000000000,", 1);
        assert_ne!(wide, TINY, "the fixture has a [64, ...] argument list");
        let e = YoloConfig::from_yaml_str(&wide, "m.yaml", None, None)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("argument 1000000000 is out of range"), "{e}");
    }

    #[test]
    fn depth_gain_rounds_half_to_even_as_python_does() {
        assert_eq!(depth_gain(2, 0.5), 1);
        assert_eq!(depth_gain(3, 0.5), 2);
        assert_eq!(depth_gain(5, 0.5), 2);
        assert_eq!(depth_gain(6, 0.33), 2);
        assert_eq!(depth_gain(1, 0.33), 1);
        assert_eq!(make_divisible(64.0 * 0.25, 8), 16);
        assert_eq!(make_divisible(1024.0 * 0.25, 8), 256);
    }
}
