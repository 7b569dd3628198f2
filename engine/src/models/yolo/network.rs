//! A YOLO detection network: the layers of the model YAML in order, each reading the outputs
//! of the layers its `from` names, ending in the `Detect` head. Parameter names are
//! ultralytics' (`model.<layer>.<path>`), so state dicts load by name.

use super::config::YoloConfig;
use super::head::{Detect, HeadOutput};
use crate::nn::{Module, Summary};
use crate::{Error, Result, Tensor};

pub(super) enum LayerKind {
    Module(Box<dyn Module>),
    Upsample(usize),
    Concat,
    Detect(Detect),
}

pub(super) struct Layer {
    /// Absolute indices of the layers whose outputs this one reads (-1 is the network input).
    pub from: Vec<isize>,
    pub kind: LayerKind,
    /// ultralytics' module type name, for summaries.
    pub type_name: String,
}

pub struct YoloModel {
    pub config: YoloConfig,
    /// Class names, index = class id.
    pub names: Vec<String>,
    /// Whether batch norms are folded into the convolutions (inference only).
    pub fused: bool,
    pub(super) layers: Vec<Layer>,
    /// Whether each layer's output is read again by a later layer (beyond the next one).
    pub(super) keep: Vec<bool>,
    pub(super) training: bool,
}

impl YoloModel {
    pub fn detect(&self) -> &Detect {
        match &self.layers.last().map(|l| &l.kind) {
            Some(LayerKind::Detect(d)) => d,
            // The builder refuses a model whose last layer is not Detect.
            _ => unreachable!("a YOLO model ends in Detect"),
        }
    }

    pub fn nc(&self) -> usize {
        self.detect().nc
    }

    /// The strides of the detection levels (8, 16, 32 for the standard models).
    pub fn strides(&self) -> &[f64] {
        &self.detect().strides
    }

    /// The largest stride: input sizes must be multiples of it.
    pub fn max_stride(&self) -> usize {
        self.strides().iter().cloned().fold(1.0, f64::max) as usize
    }

    /// Raw head outputs (box bins and class logits) for images [B, 3, H, W].
    pub fn forward_head(&self, x: &Tensor) -> Result<HeadOutput> {
        let s = x.shape();
        let stride = self.max_stride();
        if s.len() != 4
            || s[1] != 3
            || !s[2].is_multiple_of(stride)
            || !s[3].is_multiple_of(stride)
            || s[2] == 0
        {
            return Err(Error::invalid(
                "yolo",
                format!("needs images [B, 3, H, W] with H and W multiples of {stride}, got {s:?}"),
            ));
        }
        let mut outputs: Vec<Option<Tensor>> = vec![None; self.layers.len()];
        let mut last = x.clone();
        let input = |j: isize, outputs: &[Option<Tensor>], last: &Tensor| -> Result<Tensor> {
            if j < 0 {
                return Ok(x.clone());
            }
            match &outputs[j as usize] {
                Some(t) => Ok(t.clone()),
                None => Ok(last.clone()),
            }
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let y = match &layer.kind {
                LayerKind::Module(m) => m.forward(&input(layer.from[0], &outputs, &last)?)?,
                LayerKind::Upsample(s) => {
                    input(layer.from[0], &outputs, &last)?.upsample_nearest2d(*s, *s)?
                }
                LayerKind::Concat => {
                    let xs = layer
                        .from
                        .iter()
                        .map(|&j| input(j, &outputs, &last))
                        .collect::<Result<Vec<_>>>()?;
                    Tensor::cat(&xs, 1)?
                }
                LayerKind::Detect(d) => {
                    let xs = layer
                        .from
                        .iter()
                        .map(|&j| input(j, &outputs, &last))
                        .collect::<Result<Vec<_>>>()?;
                    return d.head(&xs);
                }
            };
            if self.keep[i] {
                outputs[i] = Some(y.clone());
            }
            last = y;
        }
        unreachable!("a YOLO model ends in Detect")
    }

    /// Decoded predictions [B, 4 + nc, A]: (cx, cy, w, h) in input pixels, then class
    /// probabilities, as ultralytics' model returns in inference.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let head = self.forward_head(x)?;
        self.detect().decode(&head)
    }

    /// One line per layer: index, from, type, parameter count.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{:>3}{:>20}  {:<12}{:>10}\n",
            "", "from", "module", "params"
        );
        for (i, l) in self.layers.iter().enumerate() {
            let params: usize = match &l.kind {
                LayerKind::Module(m) => m.num_parameters(),
                LayerKind::Detect(d) => d.num_parameters(),
                _ => 0,
            };
            let from: Vec<String> = l.from.iter().map(|f| f.to_string()).collect();
            out += &format!(
                "{i:>3}{:>20}  {:<12}{params:>10}\n",
                from.join(","),
                l.type_name
            );
        }
        out += &format!(
            "{} layers, {} parameters{}\n",
            self.layers.len(),
            self.num_parameters(),
            if self.fused { " (fused)" } else { "" }
        );
        out
    }
}

impl Module for YoloModel {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        YoloModel::forward(self, x)
    }

    /// The layers under ultralytics' names (`model.0`, `model.22`); concatenations and
    /// upsamplings hold nothing and are not modules.
    fn children(&self) -> Vec<(String, &dyn Module)> {
        self.layers
            .iter()
            .enumerate()
            .filter_map(|(i, l)| match &l.kind {
                LayerKind::Module(m) => Some((format!("model.{i}"), m.as_ref())),
                LayerKind::Detect(d) => Some((format!("model.{i}"), d as &dyn Module)),
                _ => None,
            })
            .collect()
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        self.layers
            .iter_mut()
            .filter_map(|l| match &mut l.kind {
                LayerKind::Module(m) => Some(m.as_mut() as &mut dyn Module),
                LayerKind::Detect(d) => Some(d as &mut dyn Module),
                _ => None,
            })
            .collect()
    }

    crate::nn::training_field!();

    /// One line: the scale, the layer count and the classes (the first eight named).
    fn summary(&self) -> Summary {
        let scale = self.config.scale.as_deref().unwrap_or("-");
        let mut names = self.names.iter().take(8).cloned().collect::<Vec<_>>();
        if self.names.len() > 8 {
            names.push("...".into());
        }
        let line = format!(
            "Yolo(scale={scale}, {} layers, {} classes [{}], fused={})",
            self.layers.len(),
            self.nc(),
            names.join(", "),
            self.fused
        );
        Summary::leaf(line, self.num_parameters())
    }
}
