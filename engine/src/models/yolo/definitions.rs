//! The model definitions that ship with the engine (YOLOv8 and YOLO11 detection), so
//! `yolo11n.yaml` resolves without a file on disk, and recognising which definition and scale a
//! bare set of weights (an ONNX export) belongs to.

use super::config::{depth_gain, make_divisible, YoloConfig};
use crate::{Error, Result, Tensor};
use std::collections::{BTreeMap, BTreeSet};

/// (family file name, YAML text).
pub const BUILTIN: &[(&str, &str)] = &[
    ("yolo11.yaml", include_str!("definitions/yolo11.yaml")),
    ("yolov8.yaml", include_str!("definitions/yolov8.yaml")),
];

/// `yolo11n.yaml`, `yolo11n`, `yolov8s.yaml` or a family name (`yolo11.yaml`, first scale)
/// -> the built-in definition at that scale.
pub fn builtin(name: &str, nc: Option<usize>) -> Option<Result<YoloConfig>> {
    let stem = name
        .strip_suffix(".yaml")
        .or(name.strip_suffix(".yml"))
        .unwrap_or(name);
    let stem = stem.rsplit(['/', '\\']).next().unwrap_or(stem);
    for (file, text) in BUILTIN {
        let family = file.trim_end_matches(".yaml");
        let scale = if stem == family {
            None
        } else if let Some(letter) = stem
            .strip_prefix(family)
            .filter(|l| l.len() == 1 && "nsmlx".contains(*l))
        {
            Some(letter)
        } else {
            continue;
        };
        return Some(
            YoloConfig::from_yaml_str(text, file, scale, nc).map(|mut c| {
                if let yaml_rust2::Yaml::Hash(h) = &mut c.source {
                    h.insert(
                        yaml_rust2::Yaml::String("yaml_file".into()),
                        yaml_rust2::Yaml::String(format!("{family}{}.yaml", scale.unwrap_or(""))),
                    );
                }
                c
            }),
        );
    }
    None
}

/// Which built-in definition and scale produced a fused or unfused state dict, from its
/// shapes: YOLO11 has a C2PSA block (`model.10.m.0.attn`), YOLOv8 does not; the scale follows
/// from the first convolution's width, the deepest layer's width and the depth of layer 2.
pub fn recognise(state: &BTreeMap<String, Tensor>, nc: usize) -> Result<YoloConfig> {
    let family = if state.keys().any(|k| k.starts_with("model.10.m.0.attn.")) {
        "yolo11"
    } else {
        "yolov8"
    };
    let dim0 = |k: &str| state.get(k).map(|t| t.shape()[0]);
    let first = dim0("model.0.conv.weight");
    let deep = dim0("model.8.cv2.conv.weight");
    let blocks: BTreeSet<&str> = state
        .keys()
        .filter_map(|k| k.strip_prefix("model.2.m."))
        .filter_map(|rest| rest.split('.').next())
        .collect();
    for letter in ["n", "s", "m", "l", "x"] {
        let name = format!("{family}{letter}");
        let cfg = match builtin(&name, Some(nc)) {
            Some(c) => c?,
            None => continue,
        };
        let width = |c: f64| make_divisible(c.min(cfg.max_channels as f64) * cfg.width, 8);
        if first == Some(width(64.0))
            && deep == Some(width(1024.0))
            && blocks.len() == depth_gain(cfg.layers[2].repeats, cfg.depth)
        {
            return Ok(cfg);
        }
    }
    Err(Error::invalid(
        "yolo",
        format!(
            "the weights match no scale of {family} (first conv {first:?} channels, layer 8 {deep:?}, {} blocks in layer 2)",
            blocks.len()
        ),
    ))
}
