//! Multi-head attention as torch.nn.MultiheadAttention, with its parameter names
//! (`in_proj_weight`, `in_proj_bias`, `out_proj.weight`, `out_proj.bias`), so state dicts move
//! between the two. Its `forward` is self-attention; `attend` takes separate queries, keys and
//! values and the masks.
//!
//! Without masks and attention dropout the scores never leave the fused attention op
//! (`scaled_dot_product_attention`); with them they are formed, masked and softmaxed as tensors.

use super::dropout::Dropout;
use super::init::{xavier_uniform_, zeros_};
use super::linear::Linear;
use super::module::{new_parameter, Module};
use crate::{AttentionOptions, DType, Error, Generator, Result, Tensor};

/// What `attend` may not look at, as PyTorch's arguments say it.
#[derive(Clone, Copy, Default)]
pub struct AttentionMasks<'a> {
    /// [B, S] bool: true marks a key (a padding position) no query attends to.
    pub key_padding_mask: Option<&'a Tensor>,
    /// [T, S] or [B * heads, T, S]: bool true marks a pair that may not attend; a float mask is
    /// added to the scores.
    pub attn_mask: Option<&'a Tensor>,
    /// Query i attends to keys 0..=i only.
    pub is_causal: bool,
}

pub struct MultiheadAttention {
    embed_dim: usize,
    num_heads: usize,
    batch_first: bool,
    in_proj_weight: Tensor,
    in_proj_bias: Option<Tensor>,
    out_proj: Linear,
    /// Applied to the attention weights in training mode.
    dropout: Dropout,
    training: bool,
}

impl MultiheadAttention {
    /// `embed_dim` split over `num_heads`; inputs are [batch, seq, embed] when `batch_first`,
    /// else [seq, batch, embed] (PyTorch's default). Initialized as PyTorch does: the joined
    /// input projection Xavier-uniform, its bias and the output bias zero.
    pub fn new(
        embed_dim: usize,
        num_heads: usize,
        bias: bool,
        dropout: f64,
        batch_first: bool,
        gen: &mut Generator,
    ) -> Result<Self> {
        if num_heads == 0 || !embed_dim.is_multiple_of(num_heads) {
            return Err(Error::invalid(
                "MultiheadAttention",
                format!("embed_dim {embed_dim} must split evenly into {num_heads} heads"),
            ));
        }
        let in_proj_weight = new_parameter(&[3 * embed_dim, embed_dim], |t| {
            xavier_uniform_(t, 1.0, gen)
        })?;
        let in_proj_bias = match bias {
            true => Some(new_parameter(&[3 * embed_dim], zeros_)?),
            false => None,
        };
        let out_proj = Linear::new(embed_dim, embed_dim, bias, gen)?;
        if let Some(b) = out_proj.bias.as_ref() {
            crate::no_grad(|| zeros_(b))?;
        }
        Ok(MultiheadAttention {
            embed_dim,
            num_heads,
            batch_first,
            in_proj_weight,
            in_proj_bias,
            out_proj,
            dropout: Dropout::new(dropout, gen)?,
            training: true,
        })
    }

    pub fn embed_dim(&self) -> usize {
        self.embed_dim
    }

    pub fn num_heads(&self) -> usize {
        self.num_heads
    }

    /// Attention of `query` [B, T, E] over `key` and `value` [B, S, E] (seq-first unless
    /// batch_first), returning [B, T, E] in the same layout.
    pub fn attend(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        masks: AttentionMasks,
    ) -> Result<Tensor> {
        let batch_major = |t: &Tensor, what: &str| -> Result<Tensor> {
            if t.rank() != 3 || t.shape()[2] != self.embed_dim {
                let layout = if self.batch_first {
                    "[B, L, E]"
                } else {
                    "[L, B, E]"
                };
                return Err(Error::layer_input(
                    self.title(),
                    format!("{what} {layout} with E = {}", self.embed_dim),
                    format!("{:?}", t.shape()),
                ));
            }
            match self.batch_first {
                true => Ok(t.clone()),
                false => t.transpose(0, 1),
            }
        };
        let (q, k, v) = (
            batch_major(query, "query")?,
            batch_major(key, "key")?,
            batch_major(value, "value")?,
        );
        if k.shape()[..2] != v.shape()[..2] || q.shape()[0] != k.shape()[0] {
            return Err(Error::invalid(
                "MultiheadAttention",
                format!(
                    "query, key and value disagree on batch or key length: {:?}, {:?}, {:?}",
                    query.shape(),
                    key.shape(),
                    value.shape()
                ),
            ));
        }
        let e = self.embed_dim as isize;
        let weights = self.in_proj_weight.chunk(3, 0)?;
        let biases = match &self.in_proj_bias {
            Some(b) => b.chunk(3, 0)?.into_iter().map(Some).collect(),
            None => vec![None, None, None],
        };
        let heads = |x: &Tensor, i: usize| -> Result<Tensor> {
            let mut y = x.matmul(&weights[i].t()?)?;
            if let Some(b) = &biases[i] {
                y = y.add(b)?;
            }
            let (b, l) = (x.shape()[0] as isize, x.shape()[1] as isize);
            let h = self.num_heads as isize;
            y.reshape(&[b, l, h, e / h])?.permute(&[0, 2, 1, 3])
        };
        let (qh, kh, vh) = (heads(&q, 0)?, heads(&k, 1)?, heads(&v, 2)?);
        let out = self.weighted_values(&qh, &kh, &vh, masks)?;
        let (b, t) = (q.shape()[0] as isize, q.shape()[1] as isize);
        let joined = out.permute(&[0, 2, 1, 3])?.reshape(&[b, t, e])?;
        let y = self.out_proj.forward(&joined)?;
        match self.batch_first {
            true => Ok(y),
            false => y.transpose(0, 1),
        }
    }

    /// softmax(q kᵀ / sqrt(d) + masks) v per head: [B, H, T, D].
    fn weighted_values(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        masks: AttentionMasks,
    ) -> Result<Tensor> {
        let dropping = self.training && self.dropout.p() > 0.0;
        let same_length = q.shape()[2] == k.shape()[2];
        if masks.key_padding_mask.is_none()
            && masks.attn_mask.is_none()
            && !dropping
            && (!masks.is_causal || same_length)
        {
            let opts = AttentionOptions {
                causal: masks.is_causal,
                scale: None,
            };
            return q.scaled_dot_product_attention(k, v, opts);
        }
        let (b, h, t, d) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
        let s = k.shape()[2];
        let mut scores = q
            .matmul(&k.transpose(-2, -1)?)?
            .mul_scalar(1.0 / (d as f64).sqrt())?;
        if masks.is_causal {
            let later: Vec<bool> = (0..t * s).map(|i| i % s > i / s).collect();
            let later = Tensor::from_vec(later, &[t, s])?.to_device(q.device())?;
            scores = scores.masked_fill(&later, f64::NEG_INFINITY)?;
        }
        if let Some(mask) = masks.attn_mask {
            let mask = match mask.rank() {
                2 => mask.clone(),
                3 if mask.shape()[0] == b * h => {
                    mask.reshape_to(&[b, h, mask.shape()[1], mask.shape()[2]])?
                }
                _ => {
                    return Err(Error::invalid(
                        "MultiheadAttention",
                        format!(
                            "attn_mask must be [{t}, {s}] or [{}, {t}, {s}], got {:?}",
                            b * h,
                            mask.shape()
                        ),
                    ))
                }
            };
            scores = match mask.dtype() {
                DType::Bool => scores.masked_fill(&mask, f64::NEG_INFINITY)?,
                _ => scores.add(&mask.to_dtype(scores.dtype())?)?,
            };
        }
        if let Some(pad) = masks.key_padding_mask {
            if pad.shape() != [b, s] || pad.dtype() != DType::Bool {
                return Err(Error::invalid(
                    "MultiheadAttention",
                    format!(
                        "key_padding_mask must be bool [{b}, {s}], got {} {:?}",
                        pad.dtype(),
                        pad.shape()
                    ),
                ));
            }
            scores = scores.masked_fill(&pad.reshape_to(&[b, 1, 1, s])?, f64::NEG_INFINITY)?;
        }
        let weights = self.dropout.forward(&scores.softmax(-1)?)?;
        weights.matmul(v)
    }
}

impl Module for MultiheadAttention {
    /// Self-attention: queries, keys and values are all `x`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.attend(x, x, x, AttentionMasks::default())
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = vec![("in_proj_weight".to_string(), self.in_proj_weight.clone())];
        if let Some(b) = &self.in_proj_bias {
            out.push(("in_proj_bias".into(), b.clone()));
        }
        out
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("out_proj".into(), &self.out_proj)]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.out_proj]
    }

    fn is_training(&self) -> bool {
        self.training
    }

    fn set_training(&mut self, on: bool) {
        self.training = on;
        self.dropout.set_training(on);
    }

    fn title(&self) -> String {
        format!(
            "MultiheadAttention(embed_dim={}, num_heads={}, dropout={}, batch_first={})",
            self.embed_dim,
            self.num_heads,
            self.dropout.p(),
            self.batch_first
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mha(batch_first: bool) -> MultiheadAttention {
        MultiheadAttention::new(8, 2, true, 0.0, batch_first, &mut Generator::new(0)).unwrap()
    }

    fn randn(shape: &[usize], seed: u64) -> Tensor {
        Tensor::randn(shape, DType::F32, Some(&mut Generator::new(seed))).unwrap()
    }

    fn close(a: &Tensor, b: &Tensor) {
        let (a, b) = (a.to_vec_f32().unwrap(), b.to_vec_f32().unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn parameters_carry_pytorch_names() {
        let names: Vec<String> = mha(true)
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            [
                "in_proj_weight",
                "in_proj_bias",
                "out_proj.weight",
                "out_proj.bias"
            ]
        );
    }

    #[test]
    fn the_fused_and_the_masked_paths_agree() {
        let m = mha(true);
        let x = randn(&[2, 5, 8], 1);
        let fused = m.forward(&x).unwrap();
        // A padding mask that masks nothing takes the explicit path.
        let none = Tensor::from_vec(vec![false; 10], &[2, 5]).unwrap();
        let masks = AttentionMasks {
            key_padding_mask: Some(&none),
            ..Default::default()
        };
        close(&fused, &m.attend(&x, &x, &x, masks).unwrap());
        // And causal the same way both ways: a bool mask above the diagonal.
        let above: Vec<bool> = (0..25).map(|i| i % 5 > i / 5).collect();
        let above = Tensor::from_vec(above, &[5, 5]).unwrap();
        let causal = AttentionMasks {
            is_causal: true,
            ..Default::default()
        };
        let explicit = AttentionMasks {
            attn_mask: Some(&above),
            ..Default::default()
        };
        close(
            &m.attend(&x, &x, &x, causal).unwrap(),
            &m.attend(&x, &x, &x, explicit).unwrap(),
        );
    }

    #[test]
    fn a_padded_key_changes_nothing_it_was_hidden_from() {
        let m = mha(true);
        let x = randn(&[1, 4, 8], 2);
        let pad = Tensor::from_vec(vec![false, false, false, true], &[1, 4]).unwrap();
        let masks = AttentionMasks {
            key_padding_mask: Some(&pad),
            ..Default::default()
        };
        let a = m.attend(&x, &x, &x, masks).unwrap();
        // Changing the hidden key's values leaves every output row alone.
        let mut changed = x.to_vec_f32().unwrap();
        for v in &mut changed[24..32] {
            *v += 3.0;
        }
        let y = Tensor::from_vec(changed, &[1, 4, 8]).unwrap();
        let b = m.attend(&x, &y, &y, masks).unwrap();
        close(&a, &b);
    }

    #[test]
    fn seq_first_is_batch_first_transposed() {
        let (a, b) = (mha(true), mha(false));
        let x = randn(&[2, 3, 8], 3);
        let seq_first = b.forward(&x.transpose(0, 1).unwrap()).unwrap();
        close(&a.forward(&x).unwrap(), &seq_first.transpose(0, 1).unwrap());
    }

    #[test]
    fn a_wrong_input_width_is_named() {
        let err = mha(true)
            .forward(&randn(&[1, 2, 6], 4))
            .unwrap_err()
            .to_string();
        assert!(err.contains("query [B, L, E] with E = 8"), "{err}");
    }
}
