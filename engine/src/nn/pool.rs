//! Layers without parameters that reshape feature maps, as PyTorch's `nn.MaxPool2d`,
//! `nn.AvgPool2d` (padding counted in the divisor), `nn.AdaptiveAvgPool2d` and `nn.Flatten`,
//! so a CNN is a `Sequential` of layers: conv, norm, activation, pool, flatten, linear.

use super::module::{training_field, Module};
use crate::io::onnx::export::{Attr, GraphBuilder};
use crate::{Error, Result, Tensor};

/// Kernel, stride and padding of a 2-D pooling window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub padding: (usize, usize),
}

impl Window {
    /// PyTorch's default: the stride is the kernel.
    pub fn new(kernel: (usize, usize)) -> Self {
        Window {
            kernel,
            stride: kernel,
            padding: (0, 0),
        }
    }

    fn attrs(&self) -> [(&'static str, Attr); 3] {
        let (k, s, p) = (self.kernel, self.stride, self.padding);
        [
            ("kernel_shape", Attr::Ints(vec![k.0 as i64, k.1 as i64])),
            ("strides", Attr::Ints(vec![s.0 as i64, s.1 as i64])),
            (
                "pads",
                Attr::Ints(vec![p.0 as i64, p.1 as i64, p.0 as i64, p.1 as i64]),
            ),
        ]
    }

    fn line(&self, name: &str) -> String {
        format!(
            "{name}(kernel_size={:?}, stride={:?}, padding={:?})",
            self.kernel, self.stride, self.padding
        )
    }
}

pub struct MaxPool2d {
    pub window: Window,
    training: bool,
}

impl MaxPool2d {
    pub fn new(window: Window) -> Self {
        MaxPool2d {
            window,
            training: true,
        }
    }
}

impl Module for MaxPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = &self.window;
        x.max_pool2d(w.kernel, w.stride, w.padding)
    }
    training_field!();
    fn title(&self) -> String {
        self.window.line("MaxPool2d")
    }
    fn to_onnx(&self, g: &mut GraphBuilder, _prefix: &str, x: &str) -> Result<String> {
        Ok(g.node("MaxPool", &[x], &self.window.attrs()))
    }
}

pub struct AvgPool2d {
    pub window: Window,
    training: bool,
}

impl AvgPool2d {
    pub fn new(window: Window) -> Self {
        AvgPool2d {
            window,
            training: true,
        }
    }
}

impl Module for AvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = &self.window;
        x.avg_pool2d(w.kernel, w.stride, w.padding)
    }
    training_field!();
    fn title(&self) -> String {
        self.window.line("AvgPool2d")
    }
    fn to_onnx(&self, g: &mut GraphBuilder, _prefix: &str, x: &str) -> Result<String> {
        let mut attrs = self.window.attrs().to_vec();
        attrs.push(("count_include_pad", Attr::Int(1)));
        Ok(g.node("AveragePool", &[x], &attrs))
    }
}

/// Averages each feature map into `output` cells; cell i of n over a side of length L covers
/// [floor(i L / n), ceil((i + 1) L / n)), as PyTorch's cells do (they overlap when n does not
/// divide L).
pub struct AdaptiveAvgPool2d {
    pub output: (usize, usize),
    training: bool,
}

impl AdaptiveAvgPool2d {
    pub fn new(output: (usize, usize)) -> Self {
        AdaptiveAvgPool2d {
            output,
            training: true,
        }
    }

    fn spans(len: usize, cells: usize) -> Vec<(usize, usize)> {
        (0..cells)
            .map(|i| (i * len / cells, ((i + 1) * len).div_ceil(cells)))
            .collect()
    }
}

impl Module for AdaptiveAvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let s = x.shape();
        let (oh, ow) = self.output;
        if s.len() != 4 || oh == 0 || ow == 0 {
            return Err(Error::invalid(
                "AdaptiveAvgPool2d",
                format!(
                    "needs [N, C, H, W] and an output of at least 1x1, got {s:?} and ({oh}, {ow})"
                ),
            ));
        }
        let (h, w) = (s[2], s[3]);
        if h % oh == 0 && w % ow == 0 {
            let k = (h / oh, w / ow);
            return x.avg_pool2d(k, k, (0, 0));
        }
        // Uneven cells: each is the mean of its own window.
        let mut rows = Vec::with_capacity(oh);
        for (y0, y1) in Self::spans(h, oh) {
            let band = x.narrow(2, y0, y1 - y0)?;
            let cells: Vec<Tensor> = Self::spans(w, ow)
                .into_iter()
                .map(|(x0, x1)| band.narrow(3, x0, x1 - x0)?.mean_dims(&[2, 3], true))
                .collect::<Result<_>>()?;
            rows.push(Tensor::cat(&cells, 3)?);
        }
        Tensor::cat(&rows, 2)
    }
    training_field!();
    fn title(&self) -> String {
        format!("AdaptiveAvgPool2d(output_size={:?})", self.output)
    }
    /// ONNX has global average pooling and fixed windows: a 1x1 output, or cells that divide the
    /// input evenly, which it cannot know ahead of the input's size. Only 1x1 is exported.
    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        if self.output != (1, 1) {
            return Err(Error::invalid(
                "export_onnx",
                format!(
                    "{prefix}AdaptiveAvgPool2d to {:?} has no ONNX operator (only a 1x1 output does: GlobalAveragePool)",
                    self.output
                ),
            ));
        }
        Ok(g.node("GlobalAveragePool", &[x], &[]))
    }
}

/// Joins the dimensions from `start_dim` on into one (PyTorch's default start is 1: one row
/// per sample).
pub struct Flatten {
    pub start_dim: usize,
    training: bool,
}

impl Flatten {
    pub fn new(start_dim: usize) -> Self {
        Flatten {
            start_dim,
            training: true,
        }
    }
}

impl Module for Flatten {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let s = x.shape();
        if self.start_dim >= s.len().max(1) {
            return Err(Error::invalid(
                "Flatten",
                format!(
                    "start_dim {} is outside a tensor of shape {s:?}",
                    self.start_dim
                ),
            ));
        }
        let mut shape = s[..self.start_dim].to_vec();
        shape.push(s[self.start_dim..].iter().product());
        x.reshape_to(&shape)
    }
    training_field!();
    fn title(&self) -> String {
        format!("Flatten(start_dim={})", self.start_dim)
    }
    /// ONNX's Flatten makes two dimensions, which is this layer from dim 1.
    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        if self.start_dim != 1 {
            return Err(Error::invalid(
                "export_onnx",
                format!(
                    "{prefix}Flatten from dim {} has no ONNX mapping (from dim 1 does)",
                    self.start_dim
                ),
            ));
        }
        Ok(g.node("Flatten", &[x], &[("axis", Attr::Int(1))]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device};

    fn ramp(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        Tensor::from_vec((0..n).map(|v| v as f32).collect(), shape).unwrap()
    }

    #[test]
    fn adaptive_pooling_to_uneven_cells_averages_overlapping_windows_as_pytorch_does() {
        // A 1x1x5x1 column into 3 cells: rows [0, 2), [1, 4), [3, 5) -> 0.5, 2, 3.5.
        let y = AdaptiveAvgPool2d::new((3, 1))
            .forward(&ramp(&[1, 1, 5, 1]))
            .unwrap();
        assert_eq!(y.shape(), [1, 1, 3, 1]);
        assert_eq!(y.to_vec_f32().unwrap(), [0.5, 2.0, 3.5]);
        // Even cells take the pooling kernel: 4x4 -> 2x2 means of 2x2 blocks.
        let y = AdaptiveAvgPool2d::new((2, 2))
            .forward(&ramp(&[1, 1, 4, 4]))
            .unwrap();
        assert_eq!(y.to_vec_f32().unwrap(), [2.5, 4.5, 10.5, 12.5]);
    }

    #[test]
    fn flatten_joins_the_trailing_dimensions_and_names_a_bad_start() {
        let x = Tensor::zeros(&[2, 3, 4, 5], DType::F32, Device::Cpu).unwrap();
        assert_eq!(Flatten::new(1).forward(&x).unwrap().shape(), [2, 60]);
        assert_eq!(Flatten::new(2).forward(&x).unwrap().shape(), [2, 3, 20]);
        let err = Flatten::new(4).forward(&x).unwrap_err().to_string();
        assert!(err.contains("start_dim 4"), "{err}");
    }

    #[test]
    fn a_parameter_free_layer_keeps_the_mode_it_is_set_to() {
        let mut pool = MaxPool2d::new(Window::new((2, 2)));
        assert!(pool.is_training());
        pool.eval();
        assert!(!pool.is_training());
        pool.train(true);
        assert!(pool.is_training());
    }

    #[test]
    fn pooling_layers_use_pytorchs_default_stride() {
        let x = ramp(&[1, 1, 4, 4]);
        let max = MaxPool2d::new(Window::new((2, 2))).forward(&x).unwrap();
        assert_eq!(max.to_vec_f32().unwrap(), [5.0, 7.0, 13.0, 15.0]);
        let avg = AvgPool2d::new(Window::new((2, 2))).forward(&x).unwrap();
        assert_eq!(avg.to_vec_f32().unwrap(), [2.5, 4.5, 10.5, 12.5]);
    }
}
