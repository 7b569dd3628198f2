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

use super::config::LayerSpec;
use super::network::YoloModel;
use crate::io::torch::{self, ModuleObject, PyObject};
use crate::nn::Module;
use crate::{DType, Error, Result, Tensor};
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

const CONV: &str = "ultralytics.nn.modules.conv.Conv";
const DWCONV: &str = "ultralytics.nn.modules.conv.DWConv";
const SEQUENTIAL: &str = "torch.nn.modules.container.Sequential";
const MODULE_LIST: &str = "torch.nn.modules.container.ModuleList";
const BLOCK: &str = "ultralytics.nn.modules.block";

/// How a convolution's channels are grouped.
#[derive(Clone, Copy)]
enum Groups {
    One,
    /// One group per output channel (depth-wise, input channels = output channels).
    PerChannel,
}

/// Builds modules from the FP16 state dict, recording which tensors went in.
struct Tree<'a> {
    state: &'a BTreeMap<String, Tensor>,
    used: BTreeSet<String>,
    reg_max: usize,
    nc: usize,
    strides: Vec<f64>,
}

type Step<T> = std::result::Result<T, String>;

impl Tree<'_> {
    fn take(&mut self, name: &str) -> Step<Tensor> {
        let t = self
            .state
            .get(name)
            .ok_or_else(|| format!("the network has no `{name}`"))?;
        self.used.insert(name.to_string());
        Ok(t.clone())
    }

    fn has(&self, name: &str) -> bool {
        self.state.contains_key(name)
    }

    /// How many numbered children `{prefix}.0`, `{prefix}.1`, ... hold tensors.
    fn count(&self, prefix: &str) -> usize {
        let start = format!("{prefix}.");
        (0..)
            .take_while(|j| {
                let child = format!("{start}{j}.");
                self.state
                    .range(child.clone()..)
                    .next()
                    .is_some_and(|(k, _)| k.starts_with(&child))
            })
            .count()
    }

    fn layer(&mut self, p: &str, spec: &LayerSpec) -> Step<ModuleObject> {
        let args = &spec.args;
        Ok(match spec.module.as_str() {
            "Conv" => {
                let s = int_arg(args, 2, 1)?;
                self.conv(p, CONV, s, Groups::One, true)?
            }
            "C2f" => self.c2f(p, "C2f", bool_arg(args, 1, false)?)?,
            // C3k2's blocks always take the shortcut.
            "C3k2" => self.c2f(p, "C3k2", true)?,
            "SPPF" => self.sppf(p, args)?,
            "C2PSA" => self.c2psa(p)?,
            "nn.Upsample" => {
                let factor = int_arg(args, 1, 2)?;
                ModuleObject::new("torch.nn.modules.upsampling.Upsample")
                    .attr("name", PyObject::str("Upsample"))
                    .attr("size", PyObject::None)
                    .attr("scale_factor", PyObject::Float(factor as f64))
                    .attr("mode", PyObject::str("nearest"))
                    .attr("align_corners", PyObject::None)
                    .attr("recompute_scale_factor", PyObject::None)
            }
            "Concat" => ModuleObject::new("ultralytics.nn.modules.conv.Concat")
                .attr("d", PyObject::Int(int_arg(args, 0, 1)? as i64)),
            "Detect" => self.detect(p, spec.from.len())?,
            other => return Err(format!("module `{other}` has no ultralytics form here")),
        })
    }

    /// ultralytics' `Conv` (or `DWConv`): Conv2d without bias, BatchNorm2d, SiLU or Identity.
    fn conv(
        &mut self,
        p: &str,
        class: &str,
        stride: usize,
        groups: Groups,
        act: bool,
    ) -> Step<ModuleObject> {
        let conv = self.conv2d(&format!("{p}.conv"), stride, groups, false)?;
        let bn = self.batch_norm(&format!("{p}.bn"))?;
        let act = match act {
            true => ModuleObject::new("torch.nn.modules.activation.SiLU")
                .attr("inplace", PyObject::Bool(false)),
            false => ModuleObject::new("torch.nn.modules.linear.Identity"),
        };
        Ok(ModuleObject::new(class)
            .child("conv", conv)
            .child("bn", bn)
            .child("act", act))
    }

    /// `torch.nn.Conv2d` with "same" padding (k / 2, ultralytics' autopad).
    fn conv2d(&mut self, p: &str, stride: usize, groups: Groups, bias: bool) -> Step<ModuleObject> {
        let weight = self.take(&format!("{p}.weight"))?;
        let bias = match bias {
            true => Some(self.take(&format!("{p}.bias"))?),
            false => None,
        };
        let &[c2, c1_per_group, kh, kw] = weight.dims() else {
            return Err(format!("`{p}.weight` is {:?}, not 4-d", weight.dims()));
        };
        let g = match groups {
            Groups::One => 1,
            Groups::PerChannel => c2,
        };
        let pair = |a: usize, b: usize| PyObject::Tuple(vec![int(a), int(b)]);
        let (ph, pw) = (kh / 2, kw / 2);
        Ok(ModuleObject::new("torch.nn.modules.conv.Conv2d")
            .param("weight", Some(weight))
            .param("bias", bias)
            .attr("in_channels", int(c1_per_group * g))
            .attr("out_channels", int(c2))
            .attr("kernel_size", pair(kh, kw))
            .attr("stride", pair(stride, stride))
            .attr("padding", pair(ph, pw))
            .attr("dilation", pair(1, 1))
            .attr("transposed", PyObject::Bool(false))
            .attr("output_padding", pair(0, 0))
            .attr("groups", int(g))
            .attr("padding_mode", PyObject::str("zeros"))
            .attr(
                "_reversed_padding_repeated_twice",
                PyObject::Tuple(vec![int(pw), int(pw), int(ph), int(ph)]),
            ))
    }

    /// `BatchNorm2d` with ultralytics' eps and momentum.
    fn batch_norm(&mut self, p: &str) -> Step<ModuleObject> {
        let weight = self.take(&format!("{p}.weight"))?;
        let c = weight.numel();
        Ok(ModuleObject::new("torch.nn.modules.batchnorm.BatchNorm2d")
            .param("weight", Some(weight))
            .param("bias", Some(self.take(&format!("{p}.bias"))?))
            .buffer(
                "running_mean",
                Some(self.take(&format!("{p}.running_mean"))?),
            )
            .buffer("running_var", Some(self.take(&format!("{p}.running_var"))?))
            .buffer(
                "num_batches_tracked",
                Some(self.take(&format!("{p}.num_batches_tracked"))?),
            )
            .attr("num_features", int(c))
            .attr("eps", PyObject::Float(super::conv::BN_EPS))
            .attr("momentum", PyObject::Float(super::conv::BN_MOMENTUM))
            .attr("affine", PyObject::Bool(true))
            .attr("track_running_stats", PyObject::Bool(true)))
    }

    fn plain_conv(&mut self, p: &str) -> Step<ModuleObject> {
        self.conv(p, CONV, 1, Groups::One, true)
    }

    /// `Bottleneck`: two convolutions; the residual when asked and the shapes allow.
    fn bottleneck(&mut self, p: &str, shortcut: bool) -> Step<ModuleObject> {
        let cv1 = self.plain_conv(&format!("{p}.cv1"))?;
        let cv2 = self.plain_conv(&format!("{p}.cv2"))?;
        let add = shortcut && in_channels(&cv1)? == out_channels(&cv2)?;
        Ok(ModuleObject::new(&format!("{BLOCK}.Bottleneck"))
            .child("cv1", cv1)
            .child("cv2", cv2)
            .attr("add", PyObject::Bool(add)))
    }

    /// C2f (YOLOv8) or C3k2 (YOLO11): a ModuleList of Bottlenecks, or of C3k blocks when the
    /// weights have them (C3k has a `cv3`).
    fn c2f(&mut self, p: &str, class: &str, shortcut: bool) -> Step<ModuleObject> {
        let cv1 = self.plain_conv(&format!("{p}.cv1"))?;
        let cv2 = self.plain_conv(&format!("{p}.cv2"))?;
        let c = out_channels(&cv1)? / 2;
        let mut blocks = Vec::new();
        for j in 0..self.count(&format!("{p}.m")) {
            let b = format!("{p}.m.{j}");
            blocks.push(if self.has(&format!("{b}.cv3.conv.weight")) {
                self.c3k(&b, shortcut)?
            } else {
                self.bottleneck(&b, shortcut)?
            });
        }
        Ok(ModuleObject::new(&format!("{BLOCK}.{class}"))
            .child("cv1", cv1)
            .child("cv2", cv2)
            .child("m", ModuleObject::container(MODULE_LIST, blocks))
            .attr("c", int(c)))
    }

    /// `C3k`: three convolutions around a Sequential of Bottlenecks.
    fn c3k(&mut self, p: &str, shortcut: bool) -> Step<ModuleObject> {
        let cv1 = self.plain_conv(&format!("{p}.cv1"))?;
        let cv2 = self.plain_conv(&format!("{p}.cv2"))?;
        let cv3 = self.plain_conv(&format!("{p}.cv3"))?;
        let blocks = (0..self.count(&format!("{p}.m")))
            .map(|j| self.bottleneck(&format!("{p}.m.{j}"), shortcut))
            .collect::<Step<Vec<_>>>()?;
        Ok(ModuleObject::new(&format!("{BLOCK}.C3k"))
            .child("cv1", cv1)
            .child("cv2", cv2)
            .child("cv3", cv3)
            .child("m", ModuleObject::container(SEQUENTIAL, blocks)))
    }

    /// SPPF: rows of at most `[c2, k]` activate the first convolution (YOLOv8, YOLO11).
    fn sppf(&mut self, p: &str, args: &[Yaml]) -> Step<ModuleObject> {
        let k = int_arg(args, 1, 5)?;
        let n = int_arg(args, 2, 3)?;
        let shortcut = bool_arg(args, 3, false)?;
        let cv1 = self.conv(&format!("{p}.cv1"), CONV, 1, Groups::One, args.len() <= 2)?;
        let cv2 = self.plain_conv(&format!("{p}.cv2"))?;
        let add = shortcut && in_channels(&cv1)? == out_channels(&cv2)?;
        let pool = ModuleObject::new("torch.nn.modules.pooling.MaxPool2d")
            .attr("kernel_size", int(k))
            .attr("stride", int(1))
            .attr("padding", int(k / 2))
            .attr("dilation", int(1))
            .attr("return_indices", PyObject::Bool(false))
            .attr("ceil_mode", PyObject::Bool(false));
        Ok(ModuleObject::new(&format!("{BLOCK}.SPPF"))
            .child("cv1", cv1)
            .child("cv2", cv2)
            .child("m", pool)
            .attr("n", int(n))
            .attr("add", PyObject::Bool(add)))
    }

    /// C2PSA: a Sequential of PSABlocks (attention, then a two-layer feed-forward).
    fn c2psa(&mut self, p: &str) -> Step<ModuleObject> {
        let cv1 = self.plain_conv(&format!("{p}.cv1"))?;
        let cv2 = self.plain_conv(&format!("{p}.cv2"))?;
        let c = out_channels(&cv1)? / 2;
        let mut blocks = Vec::new();
        for j in 0..self.count(&format!("{p}.m")) {
            let b = format!("{p}.m.{j}");
            // As our builder: one head per 64 channels, at least one.
            let num_heads = (c / 64).max(1);
            let head_dim = c / num_heads;
            let key_dim = head_dim / 2;
            let linear = |t: &mut Self, name: &str, groups| {
                t.conv(&format!("{b}.attn.{name}"), CONV, 1, groups, false)
            };
            let attn = ModuleObject::new(&format!("{BLOCK}.Attention"))
                .child("qkv", linear(self, "qkv", Groups::One)?)
                .child("proj", linear(self, "proj", Groups::One)?)
                .child("pe", linear(self, "pe", Groups::PerChannel)?)
                .attr("num_heads", int(num_heads))
                .attr("head_dim", int(head_dim))
                .attr("key_dim", int(key_dim))
                .attr("scale", PyObject::Float((key_dim as f64).powf(-0.5)));
            let ffn = ModuleObject::container(
                SEQUENTIAL,
                vec![
                    self.plain_conv(&format!("{b}.ffn.0"))?,
                    self.conv(&format!("{b}.ffn.1"), CONV, 1, Groups::One, false)?,
                ],
            );
            blocks.push(
                ModuleObject::new(&format!("{BLOCK}.PSABlock"))
                    .child("attn", attn)
                    .child("ffn", ffn)
                    .attr("add", PyObject::Bool(true)),
            );
        }
        Ok(ModuleObject::new(&format!("{BLOCK}.C2PSA"))
            .child("cv1", cv1)
            .child("cv2", cv2)
            .child("m", ModuleObject::container(SEQUENTIAL, blocks))
            .attr("c", int(c)))
    }

    /// `Detect`: per level a box branch (`cv2`) and a class branch (`cv3`: two 3x3 Convs for
    /// YOLOv8, depth-wise + 1x1 pairs for YOLO11), then the DFL.
    fn detect(&mut self, p: &str, nl: usize) -> Step<ModuleObject> {
        let legacy = self.has(&format!("{p}.cv3.0.0.conv.weight"));
        let (mut box_heads, mut class_heads) = (Vec::new(), Vec::new());
        for i in 0..nl {
            let b = format!("{p}.cv2.{i}");
            box_heads.push(ModuleObject::container(
                SEQUENTIAL,
                vec![
                    self.plain_conv(&format!("{b}.0"))?,
                    self.plain_conv(&format!("{b}.1"))?,
                    self.conv2d(&format!("{b}.2"), 1, Groups::One, true)?,
                ],
            ));
            let c = format!("{p}.cv3.{i}");
            let pair = |t: &mut Self, j: usize| -> Step<ModuleObject> {
                if legacy {
                    return t.plain_conv(&format!("{c}.{j}"));
                }
                let dw = t.conv(&format!("{c}.{j}.0"), DWCONV, 1, Groups::PerChannel, true)?;
                let pw = t.plain_conv(&format!("{c}.{j}.1"))?;
                Ok(ModuleObject::container(SEQUENTIAL, vec![dw, pw]))
            };
            let first = pair(self, 0)?;
            let second = pair(self, 1)?;
            let out = self.conv2d(&format!("{c}.2"), 1, Groups::One, true)?;
            class_heads.push(ModuleObject::container(
                SEQUENTIAL,
                vec![first, second, out],
            ));
        }
        let dfl = if self.reg_max > 1 {
            ModuleObject::new(&format!("{BLOCK}.DFL"))
                .child(
                    "conv",
                    self.conv2d(&format!("{p}.dfl.conv"), 1, Groups::One, false)?,
                )
                .attr("c1", int(self.reg_max))
        } else {
            // reg_max 1 has no DFL: its bin value is not a parameter of ultralytics' model.
            self.used.insert(format!("{p}.dfl.conv.weight"));
            ModuleObject::new("torch.nn.modules.linear.Identity")
        };
        Ok(ModuleObject::new("ultralytics.nn.modules.head.Detect")
            .child("cv2", ModuleObject::container(MODULE_LIST, box_heads))
            .child("cv3", ModuleObject::container(MODULE_LIST, class_heads))
            .child("dfl", dfl)
            .attr("nc", int(self.nc))
            .attr("nl", int(nl))
            .attr("reg_max", int(self.reg_max))
            .attr("no", int(self.nc + 4 * self.reg_max))
            .attr("stride", PyObject::Tensor(self.stride_tensor(DType::F16)?)))
    }

    /// The strides as `Detect.stride` (F16 in a half model) and `DetectionModel.stride` (F32,
    /// an attribute that `half()` leaves alone) hold them.
    fn stride_tensor(&self, dtype: DType) -> Step<Tensor> {
        let s: Vec<f32> = self.strides.iter().map(|&s| s as f32).collect();
        let n = s.len();
        Tensor::from_vec(s, &[n])
            .and_then(|t| t.to_dtype(dtype))
            .map_err(|e| e.to_string())
    }
}

fn int(v: usize) -> PyObject {
    PyObject::Int(v as i64)
}

/// The weight of a Conv's or Conv2d's convolution.
fn conv_weight(m: &ModuleObject) -> Step<&Tensor> {
    let conv = m
        .modules
        .iter()
        .find(|(n, _)| n == "conv")
        .map(|(_, c)| c)
        .unwrap_or(m);
    conv.parameters
        .iter()
        .find(|(n, _)| n == "weight")
        .and_then(|(_, t)| t.as_ref())
        .ok_or_else(|| format!("`{}` has no convolution weight", m.class))
}

fn out_channels(m: &ModuleObject) -> Step<usize> {
    Ok(conv_weight(m)?.dims()[0])
}

/// Input channels of a group-1 convolution.
fn in_channels(m: &ModuleObject) -> Step<usize> {
    Ok(conv_weight(m)?.dims()[1])
}

fn int_arg(args: &[Yaml], i: usize, default: usize) -> Step<usize> {
    match args.get(i) {
        None | Some(Yaml::Null) => Ok(default),
        Some(Yaml::Integer(v)) if *v > 0 => Ok(*v as usize),
        Some(v) => Err(format!(
            "argument {i} must be a positive integer, got {v:?}"
        )),
    }
}

fn bool_arg(args: &[Yaml], i: usize, default: bool) -> Step<bool> {
    match args.get(i) {
        None | Some(Yaml::Null) => Ok(default),
        Some(Yaml::Boolean(b)) => Ok(*b),
        Some(Yaml::String(s)) if s == "True" || s == "False" => Ok(s == "True"),
        Some(v) => Err(format!("argument {i} must be True or False, got {v:?}")),
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
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}+00:00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
