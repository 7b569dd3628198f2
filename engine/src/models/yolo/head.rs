//! The detection head (ultralytics' `Detect`): per level, a box branch (`cv2`) giving
//! 4 x reg_max distance bins and a class branch (`cv3`) giving nc logits; the DFL expectation
//! turns bins into distances, and anchors and strides turn distances into boxes.
//!
//! YOLOv8 (`legacy`) builds its class branch from two 3x3 convolutions; YOLO11 from a
//! depth-wise 3x3 plus a 1x1, twice.

use super::block::lower_child;
use super::conv::{ConvBn, ConvSpec};
use super::init::Init;
use crate::io::onnx::export::{Attr, GraphBuilder};
use crate::nn::{Conv2d, Module};
use crate::{Conv2dOptions, DType, Device, Result, Tensor};
use std::sync::Mutex;

/// One level: a box branch (two 3x3 ConvBn, then a 1x1 Conv2d with bias) and a class branch
/// (two 3x3 ConvBn for YOLOv8; depth-wise 3x3 + 1x1, twice, for YOLO11; then a 1x1 Conv2d).
/// Both branches are chains, so only their names differ between the two forms.
struct Level {
    box_convs: Vec<ConvBn>,
    box_out: Conv2d,
    class_convs: Vec<ConvBn>,
    class_out: Conv2d,
}

fn chain(convs: &[ConvBn], out: &Conv2d, x: &Tensor) -> Result<Tensor> {
    let mut y = x.clone();
    for c in convs {
        y = c.forward(&y)?;
    }
    out.forward(&y)
}

/// A tensor saved with the model and never trained (the DFL bin values).
struct Constant(Tensor);

impl Module for Constant {
    fn forward(&self, _x: &Tensor) -> Result<Tensor> {
        Ok(self.0.clone())
    }
    fn own_buffers(&self) -> Vec<(String, Tensor)> {
        vec![("weight".into(), self.0.clone())]
    }
    fn is_training(&self) -> bool {
        false
    }
    fn set_training(&mut self, _on: bool) {}
}

/// The anchor points (`anchor_grid`) as tensors for the last seen level sizes, device and
/// dtype, made once and then shared: the head's decoding and the loss both read them.
#[derive(Default)]
pub(crate) struct AnchorCache {
    last: Mutex<Option<AnchorTensors>>,
}

/// Level sizes, device and dtype, with the centres [2, A] and strides [A] made for them.
type AnchorTensors = (Vec<(usize, usize)>, Device, DType, Tensor, Tensor);

impl AnchorCache {
    /// Anchor centres [2, A] (the A x values, then the A y values, in grid units) and each
    /// anchor's stride [A], for these level sizes and strides on `device` in `dtype`.
    pub(crate) fn get(
        &self,
        sizes: &[(usize, usize)],
        strides: &[f64],
        device: Device,
        dtype: DType,
    ) -> Result<(Tensor, Tensor)> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, d, t, a, st)) = last.as_ref() {
            if s == sizes && *d == device && *t == dtype {
                return Ok((a.clone(), st.clone()));
            }
        }
        let (xys, st) = anchor_grid(sizes, strides);
        let total = st.len();
        let anchors = Tensor::from_vec(xys, &[2, total])?.to(device, dtype)?;
        let strides = Tensor::from_vec(st, &[total])?.to(device, dtype)?;
        *last = Some((
            sizes.to_vec(),
            device,
            dtype,
            anchors.clone(),
            strides.clone(),
        ));
        Ok((anchors, strides))
    }
}

/// The raw head outputs before decoding, as ultralytics' `forward_head` returns them.
pub struct HeadOutput {
    /// [B, 4 * reg_max, A]: distance bins of every anchor, levels concatenated.
    pub boxes: Tensor,
    /// [B, nc, A]: class logits.
    pub scores: Tensor,
    /// (h, w) of each level's feature map.
    pub level_sizes: Vec<(usize, usize)>,
}

pub struct Detect {
    pub nc: usize,
    pub reg_max: usize,
    pub strides: Vec<f64>,
    /// YOLOv8's class branch (plain 3x3 convolutions) rather than YOLO11's depth-wise one.
    legacy: bool,
    levels: Vec<Level>,
    /// `dfl.conv.weight` [1, reg_max, 1, 1]: the bin values (0, 1, ..., reg_max - 1).
    dfl: Constant,
    anchors: AnchorCache,
    training: bool,
}

/// ultralytics' `Detect.bias_init`, run when a model is built: box outputs start at 2.0 and
/// class logits at `log(5 / nc / (640 / stride)^2)` (about 0.01 objects per anchor over 80
/// classes at 640), so a fresh model's class loss starts small instead of at ln 2 per anchor.
fn bias_init(levels: &[Level], nc: usize, strides: &[f64]) -> Result<()> {
    crate::no_grad(|| {
        for (level, &stride) in levels.iter().zip(strides) {
            if let Some(b) = &level.box_out.bias {
                b.fill_(2.0)?;
            }
            if let Some(b) = &level.class_out.bias {
                b.fill_((5.0 / nc as f64 / (640.0 / stride).powi(2)).ln())?;
            }
        }
        Ok(())
    })
}

impl Detect {
    pub fn new(
        nc: usize,
        reg_max: usize,
        ch: &[usize],
        strides: Vec<f64>,
        legacy: bool,
        fused: bool,
        init: &mut Init<'_>,
    ) -> Result<Self> {
        let c2 = 16.max(ch[0] / 4).max(4 * reg_max);
        let c3 = ch[0].max(nc.min(100));
        let mut levels = Vec::new();
        for &x in ch {
            let conv =
                |a, b, k, init: &mut Init<'_>| ConvBn::new(ConvSpec::new(a, b, k, 1), fused, init);
            let last = |a: usize, b: usize, init: &mut Init<'_>| {
                let gen = init.claim(a * b + b, || {
                    format!("the detection head's 1x1 output from {a} to {b} channels")
                })?;
                Conv2d::new(a, b, (1, 1), Conv2dOptions::default(), true, gen)
            };
            let class_convs = if legacy {
                vec![conv(x, c3, 3, init)?, conv(c3, c3, 3, init)?]
            } else {
                vec![
                    ConvBn::depthwise(x, x, 3, fused, init)?,
                    conv(x, c3, 1, init)?,
                    ConvBn::depthwise(c3, c3, 3, fused, init)?,
                    conv(c3, c3, 1, init)?,
                ]
            };
            levels.push(Level {
                box_convs: vec![conv(x, c2, 3, init)?, conv(c2, c2, 3, init)?],
                box_out: last(c2, 4 * reg_max, init)?,
                class_convs,
                class_out: last(c3, nc, init)?,
            });
        }
        bias_init(&levels, nc, &strides)?;
        let bins: Vec<f32> = (0..reg_max).map(|i| i as f32).collect();
        Ok(Detect {
            nc,
            reg_max,
            strides,
            legacy,
            levels,
            dfl: Constant(Tensor::from_vec(bins, &[1, reg_max, 1, 1])?),
            anchors: AnchorCache::default(),
            training: true,
        })
    }

    /// Box bins and class logits of every anchor, from the feature maps of each level.
    pub fn head(&self, feats: &[Tensor]) -> Result<HeadOutput> {
        let b = feats[0].shape()[0];
        let (mut boxes, mut scores, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
        for (level, x) in self.levels.iter().zip(feats) {
            let (h, w) = (x.shape()[2], x.shape()[3]);
            sizes.push((h, w));
            let bx = chain(&level.box_convs, &level.box_out, x)?;
            let cls = chain(&level.class_convs, &level.class_out, x)?;
            boxes.push(bx.reshape_to(&[b, 4 * self.reg_max, h * w])?);
            scores.push(cls.reshape_to(&[b, self.nc, h * w])?);
        }
        Ok(HeadOutput {
            boxes: Tensor::cat(&boxes, 2)?,
            scores: Tensor::cat(&scores, 2)?,
            level_sizes: sizes,
        })
    }

    /// The DFL expectation: softmax over each side's bins, weighted by the bin values.
    /// [B, 4 * reg_max, A] -> [B, 4, A].
    pub fn dfl(&self, boxes: &Tensor) -> Result<Tensor> {
        let s = boxes.shape();
        let (b, a) = (s[0], s[2]);
        let probs = boxes.reshape_to(&[b, 4, self.reg_max, a])?.softmax(2)?;
        let bins =
            self.dfl
                .0
                .to(boxes.device(), probs.dtype())?
                .reshape_to(&[1, 1, self.reg_max, 1])?;
        probs.mul(&bins)?.sum_dims(&[2], false)
    }

    /// Decoded predictions [B, 4 + nc, A]: boxes as (cx, cy, w, h) in input pixels, then
    /// class probabilities, as ultralytics' `Detect` returns in inference.
    pub fn decode(&self, out: &HeadOutput) -> Result<Tensor> {
        let dist = self.dfl(&out.boxes)?;
        let (anchors, strides) = self.anchors_for(&out.level_sizes, dist.device(), dist.dtype())?;
        let lt = dist.narrow(1, 0, 2)?;
        let rb = dist.narrow(1, 2, 2)?;
        let x1y1 = anchors.sub(&lt)?;
        let x2y2 = anchors.add(&rb)?;
        let centre = x1y1.add(&x2y2)?.mul_scalar(0.5)?;
        let size = x2y2.sub(&x1y1)?;
        let boxes = Tensor::cat(&[centre, size], 1)?.mul(&strides)?;
        let probs = out.scores.sigmoid()?.to_dtype(boxes.dtype())?;
        Tensor::cat(&[boxes, probs], 1)
    }

    /// Anchor centres [1, 2, A] (x + 0.5, y + 0.5 per level, in grid units) and strides
    /// [1, 1, A].
    fn anchors_for(
        &self,
        sizes: &[(usize, usize)],
        device: Device,
        dtype: DType,
    ) -> Result<(Tensor, Tensor)> {
        let (anchors, strides) = self.anchors.get(sizes, &self.strides, device, dtype)?;
        let total = strides.numel();
        Ok((
            anchors.reshape_to(&[1, 2, total])?,
            strides.reshape_to(&[1, 1, total])?,
        ))
    }

    pub fn no(&self) -> usize {
        self.nc + 4 * self.reg_max
    }
}

/// Every anchor's centre (x + 0.5, y + 0.5) in grid units, levels in order and rows within a
/// level, as the A x values followed by the A y values; and each anchor's stride. As
/// ultralytics' `make_anchors` with its offset of 0.5.
pub(crate) fn anchor_grid(sizes: &[(usize, usize)], strides: &[f64]) -> (Vec<f32>, Vec<f32>) {
    let total: usize = sizes.iter().map(|(h, w)| h * w).sum();
    let (mut xs, mut ys, mut st) = (
        Vec::with_capacity(2 * total),
        Vec::with_capacity(total),
        Vec::with_capacity(total),
    );
    for (&(h, w), &stride) in sizes.iter().zip(strides) {
        for y in 0..h {
            for x in 0..w {
                xs.push(x as f32 + 0.5);
                ys.push(y as f32 + 0.5);
                st.push(stride as f32);
            }
        }
    }
    xs.extend(ys);
    (xs, st)
}

impl Module for Detect {
    /// Detect reads several feature maps; the network calls `head` and `decode` instead.
    fn forward(&self, _x: &Tensor) -> Result<Tensor> {
        Err(crate::Error::invalid(
            "Detect",
            "the detection head takes one feature map per level: call head() and decode()",
        ))
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut out: Vec<(String, &dyn Module)> = Vec::new();
        for (i, l) in self.levels.iter().enumerate() {
            for (j, c) in l.box_convs.iter().enumerate() {
                out.push((format!("cv2.{i}.{j}"), c));
            }
            out.push((format!("cv2.{i}.2"), &l.box_out));
        }
        for (i, l) in self.levels.iter().enumerate() {
            for (j, c) in l.class_convs.iter().enumerate() {
                let name = if self.legacy {
                    format!("cv3.{i}.{j}")
                } else {
                    format!("cv3.{i}.{}.{}", j / 2, j % 2)
                };
                out.push((name, c));
            }
            out.push((format!("cv3.{i}.2"), &l.class_out));
        }
        out.push(("dfl.conv".into(), &self.dfl));
        out
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut out: Vec<&mut dyn Module> = Vec::new();
        for l in &mut self.levels {
            out.extend(l.box_convs.iter_mut().map(|c| c as &mut dyn Module));
            out.push(&mut l.box_out);
            out.extend(l.class_convs.iter_mut().map(|c| c as &mut dyn Module));
            out.push(&mut l.class_out);
        }
        out
    }

    crate::nn::training_field!();

    fn to_onnx(&self, _g: &mut GraphBuilder, _prefix: &str, _x: &str) -> Result<String> {
        Err(crate::Error::invalid(
            "export_onnx",
            "the detection head takes one feature map per level: lower it with lower_head()",
        ))
    }
}

impl Detect {
    /// The head and its decoding as ONNX, from one feature-map value per level whose sizes
    /// are `level_sizes` (fixed at export: the anchors are constants of the graph). Gives
    /// [B, 4 + nc, A] as `decode` does.
    pub fn lower_head(
        &self,
        g: &mut GraphBuilder,
        prefix: &str,
        feats: &[String],
        level_sizes: &[(usize, usize)],
    ) -> Result<String> {
        let (mut boxes, mut scores) = (Vec::new(), Vec::new());
        for (i, (level, x)) in self.levels.iter().zip(feats).enumerate() {
            // The same child names as `children` gives.
            let mut bx = x.clone();
            for (j, c) in level.box_convs.iter().enumerate() {
                bx = lower_child(g, prefix, &format!("cv2.{i}.{j}"), c, &bx)?;
            }
            bx = lower_child(g, prefix, &format!("cv2.{i}.2"), &level.box_out, &bx)?;
            let mut cls = x.clone();
            for (j, c) in level.class_convs.iter().enumerate() {
                let name = match self.legacy {
                    true => format!("cv3.{i}.{j}"),
                    false => format!("cv3.{i}.{}.{}", j / 2, j % 2),
                };
                cls = lower_child(g, prefix, &name, c, &cls)?;
            }
            cls = lower_child(g, prefix, &format!("cv3.{i}.2"), &level.class_out, &cls)?;
            let flat = |g: &mut GraphBuilder, v: &str, c: usize| -> Result<String> {
                let shape = g.ints("shape", &[0, c as i64, -1])?;
                Ok(g.node("Reshape", &[v, &shape], &[]))
            };
            boxes.push(flat(g, &bx, 4 * self.reg_max)?);
            scores.push(flat(g, &cls, self.nc)?);
        }
        let (boxes, scores) = (g.concat(&boxes, 2), g.concat(&scores, 2));
        // DFL as ultralytics' graph has it: [b, 4, bins, A] -> [b, bins, 4, A], a softmax over
        // the bins, and the DFL conv (1x1, its weight the bin values 0..bins) summing them.
        let shape = g.ints("shape", &[0, 4, self.reg_max as i64, -1])?;
        let sides = g.node("Reshape", &[&boxes, &shape], &[]);
        let bins = g.node(
            "Transpose",
            &[&sides],
            &[("perm", Attr::Ints(vec![0, 2, 1, 3]))],
        );
        let probs = g.node("Softmax", &[&bins], &[("axis", Attr::Int(1))]);
        let weight = g.initializer(&format!("{prefix}dfl.conv.weight"), &self.dfl.0)?;
        let one_by_one = [
            ("kernel_shape", Attr::Ints(vec![1, 1])),
            ("strides", Attr::Ints(vec![1, 1])),
            ("pads", Attr::Ints(vec![0, 0, 0, 0])),
            ("dilations", Attr::Ints(vec![1, 1])),
            ("group", Attr::Int(1)),
        ];
        let summed = g.node("Conv", &[&probs, &weight], &one_by_one);
        let shape = g.ints("shape", &[0, 4, -1])?;
        let dist = g.node("Reshape", &[&summed, &shape], &[]);
        let (anchors, strides) = self.anchors_for(level_sizes, Device::Cpu, DType::F32)?;
        // Graph constants, named as ultralytics' exporter names its plumbing (`/model.23/...`),
        // apart from the weights (`model.23....`).
        let plumbing = format!("/{}", prefix.trim_end_matches('.'));
        let anchors = g.initializer(&format!("{plumbing}/anchors"), &anchors)?;
        let strides = g.initializer(&format!("{plumbing}/strides"), &strides)?;
        let (lt, rb) = (g.slice(&dist, 1, 0, 2)?, g.slice(&dist, 1, 2, 4)?);
        let x1y1 = g.node("Sub", &[&anchors, &lt], &[]);
        let x2y2 = g.node("Add", &[&anchors, &rb], &[]);
        let sum = g.node("Add", &[&x1y1, &x2y2], &[]);
        let half = g.scalar("half", 0.5)?;
        let centre = g.node("Mul", &[&sum, &half], &[]);
        let size = g.node("Sub", &[&x2y2, &x1y1], &[]);
        let grid = g.concat(&[centre, size], 1);
        let pixels = g.node("Mul", &[&grid, &strides], &[]);
        let probs = g.node("Sigmoid", &[&scores], &[]);
        Ok(g.concat(&[pixels, probs], 1))
    }
}
