//! The building blocks of the module tree: the tree's view of the state dict, the dispatch on
//! each YAML row's module, and the convolution, batch norm and activation modules every block
//! is made of. The blocks themselves are in `blocks.rs`.

use crate::io::torch::{ModuleObject, PyObject};
use crate::models::yolo::config::LayerSpec;
use crate::models::yolo::conv::{BN_EPS, BN_MOMENTUM};
use crate::{DType, Tensor};
use std::collections::{BTreeMap, BTreeSet};
use yaml_rust2::Yaml;

pub(super) const CONV: &str = "ultralytics.nn.modules.conv.Conv";
pub(super) const DWCONV: &str = "ultralytics.nn.modules.conv.DWConv";
pub(super) const SEQUENTIAL: &str = "torch.nn.modules.container.Sequential";
pub(super) const MODULE_LIST: &str = "torch.nn.modules.container.ModuleList";
pub(super) const BLOCK: &str = "ultralytics.nn.modules.block";

/// How a convolution's channels are grouped.
#[derive(Clone, Copy)]
pub(super) enum Groups {
    One,
    /// One group per output channel (depth-wise, input channels = output channels).
    PerChannel,
}

/// Builds modules from the FP16 state dict, recording which tensors went in.
pub(super) struct Tree<'a> {
    pub(super) state: &'a BTreeMap<String, Tensor>,
    pub(super) used: BTreeSet<String>,
    pub(super) reg_max: usize,
    pub(super) nc: usize,
    pub(super) strides: Vec<f64>,
}

pub(super) type Step<T> = std::result::Result<T, String>;

impl Tree<'_> {
    pub(super) fn take(&mut self, name: &str) -> Step<Tensor> {
        let t = self
            .state
            .get(name)
            .ok_or_else(|| format!("the network has no `{name}`"))?;
        self.used.insert(name.to_string());
        Ok(t.clone())
    }

    pub(super) fn has(&self, name: &str) -> bool {
        self.state.contains_key(name)
    }

    /// How many numbered children `{prefix}.0`, `{prefix}.1`, ... hold tensors.
    pub(super) fn count(&self, prefix: &str) -> usize {
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

    pub(super) fn layer(&mut self, p: &str, spec: &LayerSpec) -> Step<ModuleObject> {
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
    pub(super) fn conv(
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
    pub(super) fn conv2d(
        &mut self,
        p: &str,
        stride: usize,
        groups: Groups,
        bias: bool,
    ) -> Step<ModuleObject> {
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
    pub(super) fn batch_norm(&mut self, p: &str) -> Step<ModuleObject> {
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
            .attr("eps", PyObject::Float(BN_EPS))
            .attr("momentum", PyObject::Float(BN_MOMENTUM))
            .attr("affine", PyObject::Bool(true))
            .attr("track_running_stats", PyObject::Bool(true)))
    }

    pub(super) fn plain_conv(&mut self, p: &str) -> Step<ModuleObject> {
        self.conv(p, CONV, 1, Groups::One, true)
    }

    /// The strides as `Detect.stride` (F16 in a half model) and `DetectionModel.stride` (F32,
    /// an attribute that `half()` leaves alone) hold them.
    pub(super) fn stride_tensor(&self, dtype: DType) -> Step<Tensor> {
        let s: Vec<f32> = self.strides.iter().map(|&s| s as f32).collect();
        let n = s.len();
        Tensor::from_vec(s, &[n])
            .and_then(|t| t.to_dtype(dtype))
            .map_err(|e| e.to_string())
    }
}

pub(super) fn int(v: usize) -> PyObject {
    PyObject::Int(v as i64)
}

/// The weight of a Conv's or Conv2d's convolution.
pub(super) fn conv_weight(m: &ModuleObject) -> Step<&Tensor> {
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

pub(super) fn out_channels(m: &ModuleObject) -> Step<usize> {
    Ok(conv_weight(m)?.dims()[0])
}

/// Input channels of a group-1 convolution.
pub(super) fn in_channels(m: &ModuleObject) -> Step<usize> {
    Ok(conv_weight(m)?.dims()[1])
}

pub(super) fn int_arg(args: &[Yaml], i: usize, default: usize) -> Step<usize> {
    match args.get(i) {
        None | Some(Yaml::Null) => Ok(default),
        Some(Yaml::Integer(v)) if *v > 0 => Ok(*v as usize),
        Some(v) => Err(format!(
            "argument {i} must be a positive integer, got {v:?}"
        )),
    }
}

pub(super) fn bool_arg(args: &[Yaml], i: usize, default: bool) -> Step<bool> {
    match args.get(i) {
        None | Some(Yaml::Null) => Ok(default),
        Some(Yaml::Boolean(b)) => Ok(*b),
        Some(Yaml::String(s)) if s == "True" || s == "False" => Ok(s == "True"),
        Some(v) => Err(format!("argument {i} must be True or False, got {v:?}")),
    }
}
