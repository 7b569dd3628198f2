//! ResNet as torchvision builds it (`resnet18` ... `resnet152`, the "v1.5" form with the stride
//! on the 3x3 convolution of a bottleneck), with torchvision's parameter names, so a
//! `torch.save(model.state_dict())` of one loads by name: `conv1`, `bn1`, `layer1.0.conv1`,
//! `layer2.0.downsample.0`, ..., `fc`.
//!
//! stem: conv 7x7/2 → BN → ReLU → max pool 3x3/2
//! four stages of blocks (64, 128, 256, 512 channels; the first block of stages 2-4 halves the
//! size), global average pool → linear classifier.

use crate::backend::spec::UnaryOp;
use crate::nn::init::{kaiming_normal_, FanMode};
use crate::nn::{
    AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Linear, MaxPool2d, Module, Sequential, Window,
};
use crate::{Conv2dOptions, Error, Generator, Result, Tensor};

/// The two block designs: two 3x3 convolutions (ResNet-18/34), or 1x1 → 3x3 → 1x1 with four
/// times the width out (ResNet-50 and deeper).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    Basic,
    Bottleneck,
}

impl BlockKind {
    fn expansion(self) -> usize {
        match self {
            BlockKind::Basic => 1,
            BlockKind::Bottleneck => 4,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResNetConfig {
    pub block: BlockKind,
    /// Blocks in each of the four stages.
    pub layers: [usize; 4],
    pub num_classes: usize,
}

impl ResNetConfig {
    /// torchvision's `resnet{depth}`: 18, 34, 50, 101 or 152.
    pub fn depth(depth: usize, num_classes: usize) -> Result<Self> {
        let (block, layers) = match depth {
            18 => (BlockKind::Basic, [2, 2, 2, 2]),
            34 => (BlockKind::Basic, [3, 4, 6, 3]),
            50 => (BlockKind::Bottleneck, [3, 4, 6, 3]),
            101 => (BlockKind::Bottleneck, [3, 4, 23, 3]),
            152 => (BlockKind::Bottleneck, [3, 8, 36, 3]),
            other => {
                return Err(Error::invalid(
                    "ResNet",
                    format!("depth must be 18, 34, 50, 101 or 152, got {other}"),
                ))
            }
        };
        Ok(ResNetConfig {
            block,
            layers,
            num_classes,
        })
    }
}

/// A k x k convolution without bias, "same" padding, initialised as torchvision does
/// (kaiming normal, fan out, ReLU gain).
fn conv(c_in: usize, c_out: usize, k: usize, stride: usize, gen: &mut Generator) -> Result<Conv2d> {
    let options = Conv2dOptions {
        stride: (stride, stride),
        padding: (k / 2, k / 2),
        dilation: (1, 1),
        groups: 1,
    };
    let conv = Conv2d::new(c_in, c_out, (k, k), options, false, gen)?;
    kaiming_normal_(&conv.weight, 0.0, FanMode::FanOut, gen)?;
    Ok(conv)
}

/// One residual block: `relu(body(x) + shortcut(x))`.
pub struct Block {
    kind: BlockKind,
    conv1: Conv2d,
    bn1: BatchNorm2d,
    conv2: Conv2d,
    bn2: BatchNorm2d,
    /// The bottleneck's widening 1x1 (none in a basic block).
    conv3: Option<(Conv2d, BatchNorm2d)>,
    /// A strided 1x1 conv and its norm where the shape changes (torchvision's `downsample`).
    downsample: Option<Sequential>,
    training: bool,
}

impl Block {
    fn new(
        kind: BlockKind,
        c_in: usize,
        width: usize,
        stride: usize,
        gen: &mut Generator,
    ) -> Result<Block> {
        let c_out = width * kind.expansion();
        let (conv1, conv2, conv3) = match kind {
            BlockKind::Basic => (
                conv(c_in, width, 3, stride, gen)?,
                conv(width, width, 3, 1, gen)?,
                None,
            ),
            BlockKind::Bottleneck => (
                conv(c_in, width, 1, 1, gen)?,
                conv(width, width, 3, stride, gen)?,
                Some((conv(width, c_out, 1, 1, gen)?, BatchNorm2d::new(c_out)?)),
            ),
        };
        let downsample = if stride != 1 || c_in != c_out {
            let mut s = Sequential::new();
            s.push(Box::new(conv(c_in, c_out, 1, stride, gen)?));
            s.push(Box::new(BatchNorm2d::new(c_out)?));
            Some(s)
        } else {
            None
        };
        Ok(Block {
            kind,
            conv1,
            bn1: BatchNorm2d::new(width)?,
            conv2,
            bn2: BatchNorm2d::new(width)?,
            conv3,
            downsample,
            training: true,
        })
    }
}

/// conv → BN → ReLU.
fn conv_bn_relu(conv: &Conv2d, bn: &BatchNorm2d, x: &Tensor) -> Result<Tensor> {
    bn.forward_act(&conv.forward(x)?, Some(UnaryOp::Relu))
}

impl Module for Block {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = conv_bn_relu(&self.conv1, &self.bn1, x)?;
        h = match &self.conv3 {
            None => self.bn2.forward(&self.conv2.forward(&h)?)?,
            Some((conv3, bn3)) => {
                let h = conv_bn_relu(&self.conv2, &self.bn2, &h)?;
                bn3.forward(&conv3.forward(&h)?)?
            }
        };
        let shortcut = match &self.downsample {
            Some(d) => d.forward(x)?,
            None => x.clone(),
        };
        h.add(&shortcut)?.relu()
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("conv1".into(), &self.conv1),
            ("bn1".into(), &self.bn1),
            ("conv2".into(), &self.conv2),
            ("bn2".into(), &self.bn2),
        ];
        if let Some((conv3, bn3)) = &self.conv3 {
            c.push(("conv3".into(), conv3));
            c.push(("bn3".into(), bn3));
        }
        if let Some(d) = &self.downsample {
            c.push(("downsample".into(), d));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![
            &mut self.conv1,
            &mut self.bn1,
            &mut self.conv2,
            &mut self.bn2,
        ];
        if let Some((conv3, bn3)) = &mut self.conv3 {
            c.push(conv3);
            c.push(bn3);
        }
        if let Some(d) = &mut self.downsample {
            c.push(d);
        }
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        format!("{:?}Block", self.kind)
    }
}

pub struct ResNet {
    pub config: ResNetConfig,
    conv1: Conv2d,
    bn1: BatchNorm2d,
    maxpool: MaxPool2d,
    stages: [Sequential; 4],
    avgpool: AdaptiveAvgPool2d,
    fc: Linear,
    training: bool,
}

impl ResNet {
    pub fn new(config: ResNetConfig, gen: &mut Generator) -> Result<ResNet> {
        if config.num_classes == 0 || config.layers.contains(&0) {
            return Err(Error::invalid(
                "ResNet",
                format!("every stage needs a block and num_classes > 0, got {config:?}"),
            ));
        }
        let mut c_in = 64;
        let mut stages: [Sequential; 4] = Default::default();
        for (i, stage) in stages.iter_mut().enumerate() {
            let width = 64 << i;
            for b in 0..config.layers[i] {
                let stride = if i > 0 && b == 0 { 2 } else { 1 };
                stage.push(Box::new(Block::new(
                    config.block,
                    c_in,
                    width,
                    stride,
                    gen,
                )?));
                c_in = width * config.block.expansion();
            }
        }
        Ok(ResNet {
            conv1: conv(3, 64, 7, 2, gen)?,
            bn1: BatchNorm2d::new(64)?,
            maxpool: MaxPool2d::new(Window {
                kernel: (3, 3),
                stride: (2, 2),
                padding: (1, 1),
            }),
            stages,
            avgpool: AdaptiveAvgPool2d::new((1, 1)),
            fc: Linear::new(c_in, config.num_classes, true, gen)?,
            config,
            training: true,
        })
    }

    /// The pooled features before the classifier, [N, 512 * expansion].
    pub fn features(&self, x: &Tensor) -> Result<Tensor> {
        if x.rank() != 4 || x.shape()[1] != 3 {
            return Err(Error::invalid(
                "ResNet",
                format!("expects images [N, 3, H, W], got {:?}", x.shape()),
            ));
        }
        let mut h = self
            .maxpool
            .forward(&conv_bn_relu(&self.conv1, &self.bn1, x)?)?;
        for stage in &self.stages {
            h = stage.forward(&h)?;
        }
        let pooled = self.avgpool.forward(&h)?;
        let n = pooled.shape()[0];
        pooled.reshape(&[n as isize, -1])
    }
}

impl Module for ResNet {
    /// Class logits [N, num_classes] for images [N, 3, H, W].
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.fc.forward(&self.features(x)?)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("conv1".into(), &self.conv1),
            ("bn1".into(), &self.bn1),
            ("maxpool".into(), &self.maxpool),
        ];
        for (i, stage) in self.stages.iter().enumerate() {
            c.push((format!("layer{}", i + 1), stage));
        }
        c.push(("avgpool".into(), &self.avgpool));
        c.push(("fc".into(), &self.fc));
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.conv1, &mut self.bn1, &mut self.maxpool];
        for stage in &mut self.stages {
            c.push(stage);
        }
        c.push(&mut self.avgpool);
        c.push(&mut self.fc);
        c
    }

    crate::nn::training_field!();

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn title(&self) -> String {
        format!(
            "ResNet({:?} blocks {:?}, {} classes)",
            self.config.block, self.config.layers, self.config.num_classes
        )
    }

    fn input_shape(&self) -> Option<Vec<usize>> {
        Some(vec![1, 3, 224, 224])
    }
}

#[cfg(test)]
mod tests;
