//! ultralytics' blocks as module objects: Bottleneck, C2f / C3k2 and C3k, SPPF, C2PSA with its
//! attention, and the Detect head with its DFL. Attribute names and values are those each
//! block's `__init__` sets (and its `forward` reads).

use super::modules::{
    bool_arg, in_channels, int, int_arg, out_channels, Groups, Step, Tree, BLOCK, CONV, DWCONV,
    MODULE_LIST, SEQUENTIAL,
};
use crate::io::torch::{ModuleObject, PyObject};
use crate::DType;
use yaml_rust2::Yaml;

impl Tree<'_> {
    /// `Bottleneck`: two convolutions; the residual when asked and the shapes allow.
    pub(super) fn bottleneck(&mut self, p: &str, shortcut: bool) -> Step<ModuleObject> {
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
    pub(super) fn c2f(&mut self, p: &str, class: &str, shortcut: bool) -> Step<ModuleObject> {
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
    pub(super) fn c3k(&mut self, p: &str, shortcut: bool) -> Step<ModuleObject> {
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
    pub(super) fn sppf(&mut self, p: &str, args: &[Yaml]) -> Step<ModuleObject> {
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
    pub(super) fn c2psa(&mut self, p: &str) -> Step<ModuleObject> {
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
    pub(super) fn detect(&mut self, p: &str, nl: usize) -> Step<ModuleObject> {
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
}
