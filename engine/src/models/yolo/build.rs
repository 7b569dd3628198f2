//! Builds a network from a model definition the way ultralytics' `parse_model` does: the
//! scale's depth gain on repeats, its width gain and channel cap on outputs (rounded up to a
//! multiple of 8), C3k blocks inside C3k2 for the m/l/x scales, and YOLOv8's head when the
//! definition has no C3k2.

use super::blocks::{C2Psa, C2f, C2fInner, Sppf, SppfSpec};
use super::config::{depth_gain, make_divisible, LayerSpec, YoloConfig};
use super::conv::{ConvBn, ConvSpec};
use super::head::Detect;
use super::init::Init;
use super::network::{Layer, LayerKind, YoloModel};
use crate::{Error, Generator, Result, Tensor};
use std::collections::BTreeMap;
use yaml_rust2::Yaml;

/// The module types this builder knows.
pub const SUPPORTED: &[&str] = &[
    "Conv",
    "C2f",
    "C3k2",
    "SPPF",
    "C2PSA",
    "nn.Upsample",
    "Concat",
    "Detect",
];

fn layer_err(i: usize, spec: &LayerSpec, msg: impl std::fmt::Display) -> Error {
    Error::invalid("yolo model", format!("layer {i} ({}): {msg}", spec.module))
}

/// Typed access to a row's args with ultralytics' defaults.
struct Args<'a> {
    args: &'a [Yaml],
    nc: usize,
}

impl Args<'_> {
    fn int(&self, i: usize, default: Option<i64>) -> std::result::Result<i64, String> {
        match self.args.get(i) {
            None | Some(Yaml::Null) => default.ok_or(format!("argument {i} is required")),
            Some(Yaml::String(s)) if s == "nc" => Ok(self.nc as i64),
            Some(Yaml::Integer(v)) => Ok(*v),
            Some(v) => Err(format!("argument {i} must be an integer, got {v:?}")),
        }
    }
    fn boolean(&self, i: usize, default: bool) -> std::result::Result<bool, String> {
        match self.args.get(i) {
            None | Some(Yaml::Null) => Ok(default),
            Some(Yaml::Boolean(b)) => Ok(*b),
            Some(Yaml::String(s)) if s == "True" || s == "False" => Ok(s == "True"),
            Some(v) => Err(format!("argument {i} must be True or False, got {v:?}")),
        }
    }
    fn real(&self, i: usize, default: f64) -> std::result::Result<f64, String> {
        match self.args.get(i) {
            None | Some(Yaml::Null) => Ok(default),
            Some(Yaml::Integer(v)) => Ok(*v as f64),
            Some(Yaml::Real(r)) => r
                .parse()
                .map_err(|_| format!("argument {i}: bad number {r}")),
            Some(v) => Err(format!("argument {i} must be a number, got {v:?}")),
        }
    }
}

fn positive(v: i64, what: &str) -> std::result::Result<usize, String> {
    usize::try_from(v)
        .ok()
        .filter(|v| *v > 0)
        .ok_or(format!("{what} must be positive, got {v}"))
}

impl YoloModel {
    /// A freshly initialised network (PyTorch's default init), or, with `fused`, the
    /// inference form whose convolutions carry the folded batch norms.
    pub fn build(
        config: &YoloConfig,
        names: Vec<String>,
        fused: bool,
        gen: &mut Generator,
    ) -> Result<YoloModel> {
        Self::build_within(config, names, fused, &mut Init::new(gen))
    }

    /// `build` for a definition that came with `weights`: building stops with an error before
    /// it would make more values than they hold.
    pub fn build_for_weights(
        config: &YoloConfig,
        names: Vec<String>,
        fused: bool,
        weights: &BTreeMap<String, Tensor>,
    ) -> Result<YoloModel> {
        let values = weights
            .values()
            .map(|t| t.numel())
            .fold(0usize, usize::saturating_add);
        let mut gen = Generator::new(0);
        Self::build_within(
            config,
            names,
            fused,
            &mut Init::for_weights(&mut gen, values),
        )
    }

    fn build_within(
        config: &YoloConfig,
        names: Vec<String>,
        fused: bool,
        init: &mut Init<'_>,
    ) -> Result<YoloModel> {
        let input_channels = config.source["ch"].as_i64().unwrap_or(3) as usize;
        // Output channels and total stride of each layer; index -1 (the input) is the last slot.
        let mut ch: Vec<usize> = Vec::new();
        let mut stride: Vec<f64> = Vec::new();
        let mut layers: Vec<Layer> = Vec::new();
        let uses_c3k2 = config.layers.iter().any(|l| l.module == "C3k2");
        let scale_is_large = matches!(config.scale.as_deref(), Some("m" | "l" | "x"));
        for (i, spec) in config.layers.iter().enumerate() {
            let err = |m: String| layer_err(i, spec, m);
            let from: Vec<isize> = spec
                .from
                .iter()
                .map(|&f| {
                    let j = if f < 0 { i as i64 + f } else { f };
                    if j < -1 || j >= i as i64 || (j == -1 && f != -1) {
                        Err(err(format!("`from` {f} does not name an earlier layer")))
                    } else {
                        Ok(j as isize)
                    }
                })
                .collect::<Result<_>>()?;
            let ch_of = |j: isize| {
                if j < 0 {
                    input_channels
                } else {
                    ch[j as usize]
                }
            };
            let stride_of = |j: isize| if j < 0 { 1.0 } else { stride[j as usize] };
            let c1 = ch_of(from[0]);
            let n = depth_gain(spec.repeats, config.depth);
            let a = Args {
                args: &spec.args,
                nc: config.nc,
            };
            let width = |c2: i64| -> std::result::Result<usize, String> {
                let c2 = positive(c2, "output channels")?;
                Ok(make_divisible(
                    c2.min(config.max_channels) as f64 * config.width,
                    8,
                ))
            };
            let single = |m: &str| -> Result<()> {
                if from.len() != 1 || spec.repeats != 1 && m != "repeat" {
                    return Err(err("takes one input".into()));
                }
                Ok(())
            };
            let (kind, c2, s) = match spec.module.as_str() {
                "Conv" => {
                    single("")?;
                    let c2 = width(a.int(0, None).map_err(err)?).map_err(err)?;
                    let k = positive(a.int(1, Some(1)).map_err(err)?, "kernel").map_err(err)?;
                    let s = positive(a.int(2, Some(1)).map_err(err)?, "stride").map_err(err)?;
                    if spec.args.len() > 3 {
                        return Err(err(
                            "padding, groups and dilation arguments are not supported".into(),
                        ));
                    }
                    let m = ConvBn::new(ConvSpec::new(c1, c2, k, s), fused, init)?;
                    (
                        LayerKind::Module(Box::new(m)),
                        c2,
                        stride_of(from[0]) * s as f64,
                    )
                }
                "C2f" | "C3k2" => {
                    single("repeat")?;
                    let c2 = width(a.int(0, None).map_err(err)?).map_err(err)?;
                    let m = if spec.module == "C2f" {
                        let shortcut = a.boolean(1, false).map_err(err)?;
                        let e = a.real(3, 0.5).map_err(err)?;
                        C2f::new(c1, c2, n, shortcut, e, C2fInner::Bottleneck, fused, init)?
                    } else {
                        let c3k = a.boolean(1, false).map_err(err)? || scale_is_large;
                        let e = a.real(2, 0.5).map_err(err)?;
                        if a.boolean(3, false).map_err(err)? {
                            return Err(
                                err("C3k2 with attention (YOLO12) is not supported".into()),
                            );
                        }
                        let inner = if c3k {
                            C2fInner::C3k
                        } else {
                            C2fInner::HalfBottleneck
                        };
                        C2f::new(c1, c2, n, true, e, inner, fused, init)?
                    };
                    (LayerKind::Module(Box::new(m)), c2, stride_of(from[0]))
                }
                "SPPF" => {
                    single("")?;
                    let c2 = width(a.int(0, None).map_err(err)?).map_err(err)?;
                    let k = positive(a.int(1, Some(5)).map_err(err)?, "kernel").map_err(err)?;
                    let n = positive(a.int(2, Some(3)).map_err(err)?, "pool count").map_err(err)?;
                    let sppf = SppfSpec {
                        c1,
                        c2,
                        k,
                        n,
                        shortcut: a.boolean(3, false).map_err(err)?,
                        // parse_model activates cv1 for rows of at most [c2, k] (YOLOv8, YOLO11).
                        cv1_act: spec.args.len() <= 2,
                    };
                    let m = Sppf::new(sppf, fused, init)?;
                    (LayerKind::Module(Box::new(m)), c2, stride_of(from[0]))
                }
                "C2PSA" => {
                    single("repeat")?;
                    let c2 = width(a.int(0, None).map_err(err)?).map_err(err)?;
                    if c2 != c1 {
                        return Err(err(format!(
                            "needs as many output channels as input ({c1}), got {c2}"
                        )));
                    }
                    let m = C2Psa::new(c1, n, fused, init)?;
                    (LayerKind::Module(Box::new(m)), c2, stride_of(from[0]))
                }
                "nn.Upsample" => {
                    single("")?;
                    let factor =
                        positive(a.int(1, None).map_err(err)?, "scale factor").map_err(err)?;
                    if spec
                        .args
                        .get(2)
                        .and_then(|m| m.as_str())
                        .unwrap_or("nearest")
                        != "nearest"
                    {
                        return Err(err("only nearest upsampling is supported".into()));
                    }
                    (
                        LayerKind::Upsample(factor),
                        c1,
                        stride_of(from[0]) / factor as f64,
                    )
                }
                "Concat" => {
                    if a.int(0, Some(1)).map_err(err)? != 1 {
                        return Err(err(
                            "only concatenation over channels (dim 1) is supported".into()
                        ));
                    }
                    let s = stride_of(from[0]);
                    if from.iter().any(|&j| stride_of(j) != s) {
                        return Err(err("inputs have different resolutions".into()));
                    }
                    let c2 = from.iter().map(|&j| ch_of(j)).sum();
                    (LayerKind::Concat, c2, s)
                }
                "Detect" => {
                    if i + 1 != config.layers.len() {
                        return Err(err("Detect must be the last layer".into()));
                    }
                    let nc = positive(a.int(0, Some(config.nc as i64)).map_err(err)?, "nc")
                        .map_err(err)?;
                    let chs: Vec<usize> = from.iter().map(|&j| ch_of(j)).collect();
                    let strides: Vec<f64> = from.iter().map(|&j| stride_of(j)).collect();
                    let d =
                        Detect::new(nc, config.reg_max, &chs, strides, !uses_c3k2, fused, init)?;
                    (LayerKind::Detect(d), 0, 0.0)
                }
                other => {
                    return Err(err(format!(
                        "module `{other}` is not supported (supported: {})",
                        SUPPORTED.join(", ")
                    )))
                }
            };
            ch.push(c2);
            stride.push(s);
            layers.push(Layer {
                from,
                kind,
                type_name: spec.module.clone(),
            });
        }
        if !matches!(layers.last().map(|l| &l.kind), Some(LayerKind::Detect(_))) {
            return Err(Error::invalid(
                "yolo model",
                "the model must end in a Detect layer",
            ));
        }
        let nc = config.nc;
        if !names.is_empty() && names.len() != nc {
            return Err(Error::invalid(
                "yolo model",
                format!("{} class names for {nc} classes", names.len()),
            ));
        }
        let names = if names.is_empty() {
            (0..nc).map(|c| format!("class{c}")).collect()
        } else {
            names
        };
        // Outputs read by any layer other than the next one must be kept.
        let mut keep = vec![false; layers.len()];
        for (i, l) in layers.iter().enumerate() {
            for &j in &l.from {
                if j >= 0 && j as usize + 1 != i {
                    keep[j as usize] = true;
                }
            }
        }
        Ok(YoloModel {
            config: config.clone(),
            names,
            fused,
            layers,
            keep,
            training: true,
        })
    }
}
