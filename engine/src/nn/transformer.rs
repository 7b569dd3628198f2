//! The transformer encoder layer as torch.nn.TransformerEncoderLayer: self-attention and a
//! two-layer feed-forward, each with dropout, a residual and a LayerNorm, after (post-norm,
//! PyTorch's default) or before (`norm_first`) the block. Its children carry PyTorch's names
//! (`self_attn`, `linear1`, `linear2`, `norm1`, `norm2`), so state dicts move between the two.

use super::activation::Activation;
use super::attention::{AttentionMasks, MultiheadAttention};
use super::dropout::Dropout;
use super::linear::Linear;
use super::module::Module;
use super::norm::LayerNorm;
use crate::{Generator, Result, Tensor};

/// The layer's sizes and choices, with PyTorch's defaults.
#[derive(Clone, Copy, Debug)]
pub struct EncoderLayerConfig {
    pub d_model: usize,
    pub nhead: usize,
    pub dim_feedforward: usize,
    pub dropout: f64,
    pub activation: Activation,
    pub layer_norm_eps: f64,
    pub batch_first: bool,
    pub norm_first: bool,
    pub bias: bool,
}

impl EncoderLayerConfig {
    pub fn new(d_model: usize, nhead: usize) -> Self {
        EncoderLayerConfig {
            d_model,
            nhead,
            dim_feedforward: 2048,
            dropout: 0.1,
            activation: Activation::Relu,
            layer_norm_eps: 1e-5,
            batch_first: false,
            norm_first: false,
            bias: true,
        }
    }
}

pub struct TransformerEncoderLayer {
    config: EncoderLayerConfig,
    self_attn: MultiheadAttention,
    linear1: Linear,
    linear2: Linear,
    norm1: LayerNorm,
    norm2: LayerNorm,
    /// After the activation, after the attention block and after the feed-forward block.
    dropouts: [Dropout; 3],
    training: bool,
}

impl TransformerEncoderLayer {
    pub fn new(config: EncoderLayerConfig, gen: &mut Generator) -> Result<Self> {
        let c = config;
        let layer_norm = || -> Result<LayerNorm> {
            let mut norm = LayerNorm::new(&[c.d_model], c.layer_norm_eps, true)?;
            if !c.bias {
                norm.bias = None;
            }
            Ok(norm)
        };
        Ok(TransformerEncoderLayer {
            self_attn: MultiheadAttention::new(
                c.d_model,
                c.nhead,
                c.bias,
                c.dropout,
                c.batch_first,
                gen,
            )?,
            linear1: Linear::new(c.d_model, c.dim_feedforward, c.bias, gen)?,
            linear2: Linear::new(c.dim_feedforward, c.d_model, c.bias, gen)?,
            norm1: layer_norm()?,
            norm2: layer_norm()?,
            dropouts: [
                Dropout::new(c.dropout, gen)?,
                Dropout::new(c.dropout, gen)?,
                Dropout::new(c.dropout, gen)?,
            ],
            config,
            training: true,
        })
    }

    /// The layer over `src` with masks for the self-attention (`key_padding_mask` is PyTorch's
    /// `src_key_padding_mask`).
    pub fn encode(&self, src: &Tensor, masks: AttentionMasks) -> Result<Tensor> {
        let attention = |x: &Tensor| -> Result<Tensor> {
            self.dropouts[1].forward(&self.self_attn.attend(x, x, x, masks)?)
        };
        let feed_forward = |x: &Tensor| -> Result<Tensor> {
            let hidden = self.config.activation.apply(&self.linear1.forward(x)?)?;
            let out = self.linear2.forward(&self.dropouts[0].forward(&hidden)?)?;
            self.dropouts[2].forward(&out)
        };
        if self.config.norm_first {
            let x = src.add(&attention(&self.norm1.forward(src)?)?)?;
            x.add(&feed_forward(&self.norm2.forward(&x)?)?)
        } else {
            let x = self.norm1.forward(&src.add(&attention(src)?)?)?;
            self.norm2.forward(&x.add(&feed_forward(&x)?)?)
        }
    }
}

impl Module for TransformerEncoderLayer {
    fn forward(&self, src: &Tensor) -> Result<Tensor> {
        self.encode(src, AttentionMasks::default())
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("self_attn".into(), &self.self_attn),
            ("linear1".into(), &self.linear1),
            ("linear2".into(), &self.linear2),
            ("norm1".into(), &self.norm1),
            ("norm2".into(), &self.norm2),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let [d0, d1, d2] = &mut self.dropouts;
        vec![
            &mut self.self_attn,
            &mut self.linear1,
            &mut self.linear2,
            &mut self.norm1,
            &mut self.norm2,
            d0,
            d1,
            d2,
        ]
    }

    super::module::training_field!();

    fn detail(&self) -> String {
        let c = &self.config;
        format!(
            "d_model={}, nhead={}, dim_feedforward={}, dropout={}, activation={:?}, norm_first={}, batch_first={}",
            c.d_model, c.nhead, c.dim_feedforward, c.dropout, c.activation, c.norm_first, c.batch_first
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn layer(norm_first: bool) -> TransformerEncoderLayer {
        let mut c = EncoderLayerConfig::new(8, 2);
        c.dim_feedforward = 16;
        c.batch_first = true;
        c.norm_first = norm_first;
        TransformerEncoderLayer::new(c, &mut Generator::new(0)).unwrap()
    }

    #[test]
    fn children_carry_pytorch_names() {
        let names: Vec<String> = layer(false)
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            [
                "self_attn.in_proj_weight",
                "self_attn.in_proj_bias",
                "self_attn.out_proj.weight",
                "self_attn.out_proj.bias",
                "linear1.weight",
                "linear1.bias",
                "linear2.weight",
                "linear2.bias",
                "norm1.weight",
                "norm1.bias",
                "norm2.weight",
                "norm2.bias"
            ]
        );
    }

    #[test]
    fn post_norm_output_rows_are_normalized() {
        let mut l = layer(false);
        l.eval();
        let x = Tensor::randn(&[2, 3, 8], DType::F32, Some(&mut Generator::new(1))).unwrap();
        let y = l.forward(&x).unwrap();
        assert_eq!(y.shape(), &[2, 3, 8]);
        // norm2 comes last with weight 1 and bias 0: every row has mean 0 and variance 1.
        let mean = y
            .mean_dims(&[-1], false)
            .unwrap()
            .abs()
            .unwrap()
            .max()
            .unwrap();
        assert!(mean.item().unwrap() < 1e-5);
    }

    #[test]
    fn eval_makes_the_layer_deterministic_and_train_does_not() {
        let mut l = layer(true);
        let x = Tensor::randn(&[1, 4, 8], DType::F32, Some(&mut Generator::new(2))).unwrap();
        let differ = |l: &TransformerEncoderLayer| {
            let (a, b) = (l.forward(&x).unwrap(), l.forward(&x).unwrap());
            a.sub(&b)
                .unwrap()
                .abs()
                .unwrap()
                .max()
                .unwrap()
                .item()
                .unwrap()
                > 0.0
        };
        assert!(differ(&l), "dropout 0.1 in training mode");
        l.eval();
        assert!(!differ(&l));
    }
}
