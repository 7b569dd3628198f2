//! Saving a network as an ultralytics checkpoint (`best.pt`), which `ultralytics.YOLO(path)`
//! loads, predicts and validates with.
//!
//! ultralytics loads a `.pt` with `torch.load(weights_only=False)` and takes the pickled
//! `nn.Module` under `ema` or `model`, so the file holds the module tree itself: a
//! `DetectionModel` whose `model` is a `Sequential` of the layers that `parse_model` builds from
//! the model YAML, each with the attributes its `forward` reads. The tree is made here from the
//! definition and the state dict: our parameter names are ultralytics' own, so each module takes
//! its tensors by name, and shapes give the channel counts. What is saved is the shape of
//! ultralytics' final weights (`strip_optimizer`): an FP16 `model`, no EMA and no optimizer.

mod blocks;
mod modules;

use super::network::YoloModel;
use crate::io::torch::{self, ModuleObject, PyObject};
use crate::nn::Module;
use crate::{DType, Error, Result, Tensor};
use modules::Tree;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use yaml_rust2::Yaml;

/// The ultralytics version whose checkpoint layout this writes.
pub const ULTRALYTICS_VERSION: &str = "8.4.190";

/// What a checkpoint records beside the network.
#[derive(Clone, Debug)]
pub struct PtMeta {
    /// The last finished epoch; -1 marks final weights, as ultralytics' `strip_optimizer` does.
    pub epoch: i64,
    pub best_fitness: Option<f64>,
    /// The training arguments (`train_args`). A loaded model keeps `task`, `imgsz`, `data`
    /// and `single_cls` of them; `task` is `detect` when absent.
    pub train_args: serde_json::Map<String, serde_json::Value>,
    /// Final metrics by ultralytics' names (`metrics/mAP50-95(B)`, `fitness`).
    pub train_metrics: Vec<(String, f64)>,
    /// Per-epoch results by column, as in `results.csv`.
    pub train_results: Vec<(String, Vec<f64>)>,
    /// When the weights were saved (ISO 8601); the current time when `None`.
    pub date: Option<String>,
    pub license: String,
    pub docs: String,
}

impl Default for PtMeta {
    fn default() -> Self {
        PtMeta {
            epoch: -1,
            best_fitness: None,
            train_args: serde_json::Map::new(),
            train_metrics: Vec::new(),
            train_results: Vec::new(),
            date: None,
            license: "AGPL-3.0 (https://ultralytics.com/license)".into(),
            docs: "https://docs.ultralytics.com".into(),
        }
    }
}

fn save_err(msg: impl std::fmt::Display) -> Error {
    Error::invalid("yolo save_ultralytics_pt", msg.to_string())
}

impl YoloModel {
    /// Writes the network as an ultralytics checkpoint at `path`, weights in FP16.
    pub fn save_ultralytics_pt(&self, path: &Path, meta: &PtMeta) -> Result<()> {
        let checkpoint = self.ultralytics_checkpoint(meta)?;
        torch::save_pt(path, &checkpoint)
    }

    /// The checkpoint dict that `save_ultralytics_pt` pickles.
    pub fn ultralytics_checkpoint(&self, meta: &PtMeta) -> Result<PyObject> {
        let mut train_args = meta.train_args.clone();
        train_args
            .entry("task")
            .or_insert_with(|| serde_json::Value::String("detect".into()));
        let train_args = json_to_py(&serde_json::Value::Object(train_args));
        let model = self.detection_model(train_args.clone())?;
        let metrics = PyObject::str_dict(
            meta.train_metrics
                .iter()
                .map(|(k, v)| (k.clone(), PyObject::Float(*v))),
        );
        let results = PyObject::str_dict(meta.train_results.iter().map(|(k, col)| {
            let values = col.iter().map(|v| PyObject::Float(*v)).collect();
            (k.clone(), PyObject::List(values))
        }));
        let date = meta.date.clone().unwrap_or_else(now_iso8601);
        Ok(PyObject::str_dict([
            ("date", PyObject::Str(date)),
            ("version", PyObject::str(ULTRALYTICS_VERSION)),
            ("license", PyObject::Str(meta.license.clone())),
            ("docs", PyObject::Str(meta.docs.clone())),
            ("epoch", PyObject::Int(meta.epoch)),
            (
                "best_fitness",
                PyObject::option(meta.best_fitness.map(PyObject::Float)),
            ),
            ("model", model.to_object(false)),
            ("ema", PyObject::None),
            ("updates", PyObject::None),
            ("optimizer", PyObject::None),
            ("train_args", train_args),
            ("train_metrics", metrics),
            ("train_results", results),
        ]))
    }

    /// `ultralytics.nn.tasks.DetectionModel` with FP16 weights, in eval mode.
    fn detection_model(&self, args: PyObject) -> Result<ModuleObject> {
        if self.fused {
            return Err(save_err(
                "a fused network (batch norms folded) cannot be saved as an ultralytics \
                 checkpoint; save the unfused network",
            ));
        }
        let state = self
            .state_dict()
            .into_iter()
            .map(|(k, t)| {
                let t = match t.dtype() {
                    DType::F32 | DType::BF16 | DType::F64 => t.to_dtype(DType::F16)?,
                    _ => t,
                };
                Ok((k, t))
            })
            .collect::<Result<BTreeMap<_, _>>>()?;
        let mut tree = Tree {
            state: &state,
            used: BTreeSet::new(),
            reg_max: self.config.reg_max,
            nc: self.nc(),
            strides: self.strides().to_vec(),
        };
        let mut layers = Vec::with_capacity(self.config.layers.len());
        let mut save = Vec::new();
        for (i, spec) in self.config.layers.iter().enumerate() {
            let prefix = format!("model.{i}");
            let layer = tree
                .layer(&prefix, spec)
                .map_err(|m| save_err(format!("layer {i} ({}): {m}", spec.module)))?;
            let np = layer.num_parameters();
            let from = match spec.from.as_slice() {
                [f] => PyObject::Int(*f),
                fs => PyObject::List(fs.iter().map(|&f| PyObject::Int(f)).collect()),
            };
            let class = layer.class.clone();
            let mut layer = layer
                .attr("np", PyObject::Int(np as i64))
                .attr("i", PyObject::Int(i as i64))
                .attr("f", from)
                .attr("type", PyObject::Str(class));
            if spec.module == "Detect" {
                // `DetectionModel.half()` converts Detect's stride and its (empty) anchor
                // caches too, which makes them instance attributes.
                let empty = || Tensor::zeros(&[0], DType::F16, crate::Device::Cpu);
                layer = layer
                    .attr("inplace", PyObject::Bool(true))
                    .attr("anchors", PyObject::Tensor(empty()?))
                    .attr("strides", PyObject::Tensor(empty()?));
            }
            layers.push(layer);
            // parse_model's save list: every input but the previous layer's, sorted.
            save.extend(
                spec.from
                    .iter()
                    .filter(|&&f| f != -1)
                    .map(|&f| f.rem_euclid(i.max(1) as i64)),
            );
        }
        save.sort_unstable();
        let unused: Vec<&String> = state.keys().filter(|k| !tree.used.contains(*k)).collect();
        if !unused.is_empty() {
            return Err(save_err(format!(
                "the ultralytics module tree has no place for {} tensors: {}",
                unused.len(),
                unused
                    .iter()
                    .take(8)
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let mut yaml = yaml_to_py(&self.config.source);
        if let PyObject::Dict(items) = &mut yaml {
            if !items
                .iter()
                .any(|(k, _)| matches!(k, PyObject::Str(s) if s == "channels"))
            {
                let ch = self.config.source["ch"].as_i64().unwrap_or(3);
                items.push((PyObject::str("channels"), PyObject::Int(ch)));
            }
        }
        let names = PyObject::Dict(
            self.names
                .iter()
                .enumerate()
                .map(|(i, n)| (PyObject::Int(i as i64), PyObject::Str(n.clone())))
                .collect(),
        );
        Ok(ModuleObject::new("ultralytics.nn.tasks.DetectionModel")
            .child(
                "model",
                ModuleObject::container("torch.nn.modules.container.Sequential", layers),
            )
            .attr("yaml", yaml)
            .attr(
                "save",
                PyObject::List(save.into_iter().map(PyObject::Int).collect()),
            )
            .attr("names", names)
            .attr("inplace", PyObject::Bool(true))
            .attr(
                "stride",
                PyObject::Tensor(tree.stride_tensor(DType::F32).map_err(save_err)?),
            )
            .attr("args", args))
    }
}

/// A YAML tree as the Python data `yaml.safe_load` gives.
fn yaml_to_py(y: &Yaml) -> PyObject {
    match y {
        Yaml::Real(r) => r
            .parse()
            .map(PyObject::Float)
            .unwrap_or_else(|_| PyObject::Str(r.clone())),
        Yaml::Integer(i) => PyObject::Int(*i),
        Yaml::String(s) => PyObject::Str(s.clone()),
        Yaml::Boolean(b) => PyObject::Bool(*b),
        Yaml::Array(items) => PyObject::List(items.iter().map(yaml_to_py).collect()),
        Yaml::Hash(h) => PyObject::Dict(
            h.iter()
                .map(|(k, v)| (yaml_to_py(k), yaml_to_py(v)))
                .collect(),
        ),
        Yaml::Alias(_) | Yaml::Null | Yaml::BadValue => PyObject::None,
    }
}

/// JSON as Python data: objects become dicts, integers ints, other numbers floats.
fn json_to_py(v: &serde_json::Value) -> PyObject {
    use serde_json::Value as J;
    match v {
        J::Null => PyObject::None,
        J::Bool(b) => PyObject::Bool(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => PyObject::Int(i),
            None => PyObject::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => PyObject::Str(s.clone()),
        J::Array(items) => PyObject::List(items.iter().map(json_to_py).collect()),
        J::Object(map) => PyObject::str_dict(map.iter().map(|(k, v)| (k.clone(), json_to_py(v)))),
    }
}

/// The current UTC time as `2025-01-31T12:34:56+00:00`.
fn now_iso8601() -> String {
    let secs = crate::io::clock::now_unix();
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = crate::io::clock::civil(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}+00:00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
