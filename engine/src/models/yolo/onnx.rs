//! ONNX export of a YOLO detector, in the layout ultralytics exports: input `images`
//! [batch, 3, H, W] (F32, 0-1), output `output0` [batch, 4 + nc, anchors] with boxes as
//! (cx, cy, w, h) in input pixels and class probabilities. The image size is fixed at export,
//! so the anchors are constants; the batch is named under `dynamic_batch`.

use super::network::{LayerKind, YoloModel};
use crate::io::onnx::export::{write_model, Attr, ExportOptions, GraphBuilder};
use crate::{DType, Error, Result, Tensor};
use std::path::Path;

impl YoloModel {
    /// Writes the eval-mode network at image size `(h, w)` (multiples of the largest stride).
    pub fn export_onnx(
        &self,
        size: (usize, usize),
        path: impl AsRef<Path>,
        opts: &ExportOptions,
    ) -> Result<()> {
        write_model(self.onnx_graph(size, opts)?, path)
    }

    /// The graph `export_onnx` writes: the fused network (each batch norm folded into its
    /// convolution), as ultralytics exports it and as `load_onnx` maps a file back.
    pub(super) fn onnx_graph(
        &self,
        size: (usize, usize),
        opts: &ExportOptions,
    ) -> Result<GraphBuilder> {
        if !self.fused {
            return self.fuse()?.onnx_graph(size, opts);
        }
        let (h, w) = size;
        let stride = self.max_stride();
        if h == 0 || w == 0 || !h.is_multiple_of(stride) || !w.is_multiple_of(stride) {
            return Err(Error::invalid(
                "export_onnx",
                format!("the image size must be multiples of {stride}, got {h}x{w}"),
            ));
        }
        let mut g = GraphBuilder::new(opts.checked_opset()?);
        // ultralytics' metadata: what its loaders (and ours) read the classes and stride from.
        g.metadata("description", "YOLO detector exported by rusting_brain");
        g.metadata("task", "detect");
        g.metadata("stride", stride.to_string());
        g.metadata("batch", "1");
        g.metadata("imgsz", format!("[{h}, {w}]"));
        g.metadata("names", python_dict(&self.names));
        let images = g.input("images", &opts.dims(&[1, 3, h, w]), DType::F32);
        let level_sizes: Vec<(usize, usize)> = self
            .strides()
            .iter()
            .map(|&s| (h / s as usize, w / s as usize))
            .collect();
        let anchors: usize = level_sizes.iter().map(|(a, b)| a * b).sum();
        let mut outputs: Vec<Option<String>> = vec![None; self.layers.len()];
        let mut last = images.clone();
        let input = |j: isize, outputs: &[Option<String>], last: &String| match j {
            j if j < 0 => images.clone(),
            j => outputs[j as usize].clone().unwrap_or_else(|| last.clone()),
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let prefix = format!("model.{i}.");
            let inputs: Vec<String> = layer
                .from
                .iter()
                .map(|&j| input(j, &outputs, &last))
                .collect();
            let y = match &layer.kind {
                LayerKind::Module(m) => m.to_onnx(&mut g, &prefix, &inputs[0])?,
                LayerKind::Upsample(s) => upsample(&mut g, &inputs[0], *s)?,
                LayerKind::Concat => g.concat(&inputs, 1),
                LayerKind::Detect(d) => {
                    let out = d.lower_head(&mut g, &prefix, &inputs, &level_sizes)?;
                    let dims = opts.dims(&[1, 4 + d.nc, anchors]);
                    g.output(&out, "output0", &dims);
                    return Ok(g);
                }
            };
            if self.keep[i] {
                outputs[i] = Some(y.clone());
            }
            last = y;
        }
        unreachable!("a YOLO model ends in Detect")
    }
}

/// Class names as Python writes a dict of them (`{0: 'person', 1: "it's"}`), the form
/// ultralytics stores and `parse_python_literal` reads.
fn python_dict(names: &[String]) -> String {
    let quoted = |n: &str| match (n.contains('\''), n.contains('"')) {
        (true, false) => format!("\"{}\"", n.replace('\\', "\\\\")),
        _ => format!("'{}'", n.replace('\\', "\\\\").replace('\'', "\\'")),
    };
    let items: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{i}: {}", quoted(n)))
        .collect();
    format!("{{{}}}", items.join(", "))
}

/// Nearest-neighbour upsampling by an integer factor: out[i] = in[floor(i / s)].
fn upsample(g: &mut GraphBuilder, x: &str, s: usize) -> Result<String> {
    let scales = Tensor::from_vec(vec![1.0f32, 1.0, s as f32, s as f32], &[4])?;
    let scales_name = g.fresh("scales");
    let scales = g.initializer(&scales_name, &scales)?;
    let attrs = [
        ("mode", Attr::Str("nearest")),
        ("coordinate_transformation_mode", Attr::Str("asymmetric")),
        ("nearest_mode", Attr::Str("floor")),
    ];
    Ok(g.node("Resize", &[x, "", &scales], &attrs))
}
