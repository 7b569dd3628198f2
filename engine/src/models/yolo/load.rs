//! Opening YOLO weights of every supported kind: an ultralytics `.pt` checkpoint (read by the
//! restricted unpickler; the model YAML and class names come from the checkpoint), our
//! safetensors files, an ultralytics ONNX export, or a model YAML for a fresh network.

use super::config::YoloConfig;
use super::network::YoloModel;
use crate::io::torch::{self, Value};
use crate::nn::Module;
use crate::{Error, Generator, Result, Tensor};
use std::collections::BTreeMap;
use std::path::Path;
use yaml_rust2::Yaml;

fn load_err(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::invalid("yolo load", format!("{}: {msg}", path.display()))
}

impl YoloModel {
    /// Opens `path` by its extension: `.pt`/`.pth`, `.safetensors`, `.onnx`, or a model YAML
    /// (built-in names like `yolo11n.yaml` included) for a freshly initialised network.
    pub fn load(path: &Path) -> Result<YoloModel> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        match ext.as_str() {
            "pt" | "pth" => Self::load_pt(path),
            "safetensors" => Self::load_safetensors(path),
            "onnx" => Self::load_onnx(path),
            "yaml" | "yml" => {
                let cfg = YoloConfig::from_file(path, None)?;
                let mut m = YoloModel::build(&cfg, Vec::new(), false, &mut Generator::new(0))?;
                m.eval();
                Ok(m)
            }
            _ => Err(load_err(
                path,
                "unknown weights format: expected .pt, .pth, .safetensors, .onnx or a model .yaml",
            )),
        }
    }

    /// An ultralytics checkpoint: `ema` when present, else `model` (a `best.pt` holds an FP16
    /// `model` and no EMA). Weights are cast to F32.
    pub fn load_pt(path: &Path) -> Result<YoloModel> {
        let ckpt = torch::load_pt(path)?;
        let present = |k: &str| ckpt.get(k).filter(|v| !matches!(v, Value::None));
        let module = present("ema").or_else(|| present("model")).ok_or_else(|| {
            load_err(
                path,
                "the checkpoint has neither `ema` nor `model`; is it an ultralytics checkpoint?",
            )
        })?;
        let yaml = module
            .get("yaml")
            .ok_or_else(|| load_err(path, "the model has no `yaml` attribute (its definition)"))?;
        let yaml = to_yaml(yaml).map_err(|m| load_err(path, format!("`yaml`: {m}")))?;
        let origin = path.display().to_string();
        let config = YoloConfig::from_yaml(yaml, &origin, None, None)?;
        let names = match module.get("names") {
            Some(v) => class_names(v).map_err(|m| load_err(path, format!("`names`: {m}")))?,
            None => Vec::new(),
        };
        let state: BTreeMap<String, Tensor> =
            torch::module_state_dict(module)?.into_iter().collect();
        // A checkpoint saved after `fuse()` has biases on its convolutions and no batch norms.
        let fused = !state.keys().any(|k| k.contains(".bn."));
        let mut model = YoloModel::build_for_weights(&config, names, fused, &state)?;
        model.load_weights(&state, &origin)?;
        model.eval();
        Ok(model)
    }
}

impl YoloModel {
    /// An ultralytics ONNX export: the initializers of the fused, exported network (named
    /// `model.<layer>...`) mapped onto our fused network. The class names come from the
    /// export's metadata; the family (YOLOv8 or YOLO11) and scale from the weights' shapes.
    /// The file's graph must be that network (`onnx_check`).
    pub fn load_onnx(path: &Path) -> Result<YoloModel> {
        let onnx = crate::io::onnx::read_onnx(path)?;
        let names = match onnx.metadata_value("names") {
            Some(text) => {
                let v = crate::io::onnx::parse_python_literal(text)?;
                class_names(&v).map_err(|m| load_err(path, format!("metadata `names`: {m}")))?
            }
            None => Vec::new(),
        };
        // Only the network's own weights; the exporter's constants (`onnx::Split_138`, shape
        // arithmetic under `/model.22/...`) are graph plumbing.
        let state: BTreeMap<String, Tensor> = onnx
            .initializers
            .iter()
            .filter(|(n, _)| n.starts_with("model."))
            .cloned()
            .collect();
        let nc =
            match (
                names.len(),
                state.iter().find(|(k, _)| k.ends_with(".cv3.0.2.weight")),
            ) {
                (n, _) if n > 0 => n,
                (_, Some((_, w))) => w.shape()[0],
                _ => return Err(load_err(
                    path,
                    "no class names in the metadata and no detection head to count classes from",
                )),
            };
        let config = super::definitions::recognise(&state, nc).map_err(|e| load_err(path, e))?;
        let origin = path.display().to_string();
        let mut model = YoloModel::build_for_weights(&config, names, true, &state)?;
        model.load_weights(&state, &origin)?;
        model.eval();
        super::onnx_check::check_graph(&onnx, &model, &origin)?;
        Ok(model)
    }
}

/// A pickled Python value (dicts, lists, strings, numbers) as a YAML tree.
pub fn to_yaml(v: &Value) -> std::result::Result<Yaml, String> {
    Ok(match v {
        Value::None => Yaml::Null,
        Value::Bool(b) => Yaml::Boolean(*b),
        Value::Int(i) => Yaml::Integer(*i),
        Value::Float(f) => Yaml::Real(format!("{f:?}")),
        Value::Str(s) => Yaml::String(s.clone()),
        Value::List(items) | Value::Tuple(items) => Yaml::Array(
            items
                .iter()
                .map(to_yaml)
                .collect::<std::result::Result<_, _>>()?,
        ),
        Value::Dict(items) => {
            let mut h = yaml_rust2::yaml::Hash::new();
            for (k, v) in items {
                h.insert(to_yaml(k)?, to_yaml(v)?);
            }
            Yaml::Hash(h)
        }
        other => {
            return Err(format!(
                "a {} cannot appear in a model definition",
                other.kind()
            ))
        }
    })
}

/// Class names from `{0: 'person', 1: 'car'}` or `['person', 'car']`, in class order.
pub fn class_names(v: &Value) -> std::result::Result<Vec<String>, String> {
    match v {
        Value::List(items) | Value::Tuple(items) => items
            .iter()
            .map(|n| {
                n.as_str()
                    .map(str::to_string)
                    .ok_or("names must be strings".to_string())
            })
            .collect(),
        Value::Dict(items) => {
            let mut pairs = items
                .iter()
                .map(|(k, n)| match (k.as_i64(), n.as_str()) {
                    (Some(i), Some(s)) if i >= 0 => Ok((i as usize, s.to_string())),
                    _ => Err("names must map class ids to strings".to_string()),
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            pairs.sort();
            if pairs.iter().enumerate().any(|(i, (k, _))| i != *k) {
                return Err("class ids must be 0, 1, 2, ... without gaps".into());
            }
            Ok(pairs.into_iter().map(|(_, s)| s).collect())
        }
        other => Err(format!("expected a dict or list, got a {}", other.kind())),
    }
}
