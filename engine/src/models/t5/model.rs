//! The encoder's layers with transformers' parameter names (`encoder.block.{i}.layer.0` the
//! attention, `layer.1` the feed-forward, `shared` the token embedding).

use super::config::T5Config;
use crate::io::pretrained::{load_weights, read_config};
use crate::models::hf_config::Fields;
use crate::nn::{Embedding, Linear, Module, RmsNorm};
use crate::{DType, Error, Generator, Result, Tensor};
use std::path::Path;

/// The bucket of each (query i, key j) pair's distance j - i, [queries · keys] row-major, as
/// T5's bidirectional `_relative_position_bucket`: half the buckets for keys after the query;
/// within each half, distances below a quarter of the buckets have one bucket each and longer
/// ones share logarithmically wider buckets up to `max_distance`. The logarithm is taken in
/// f32, as transformers takes it, so the boundaries fall where its do.
pub fn relative_position_buckets(
    queries: usize,
    keys: usize,
    num_buckets: usize,
    max_distance: usize,
) -> Vec<i64> {
    let half = num_buckets / 2;
    let exact = half / 2;
    let log_range = ((max_distance as f64) / (exact as f64)).ln();
    let mut out = Vec::with_capacity(queries * keys);
    for i in 0..queries {
        for j in 0..keys {
            let rel = j as i64 - i as i64;
            let side = if rel > 0 { half } else { 0 };
            let d = rel.unsigned_abs() as usize;
            let bucket = if d < exact {
                d
            } else {
                let ratio = ((d as f32) / (exact as f32)).ln() / log_range as f32;
                let large = exact + (ratio * (half - exact) as f32) as usize;
                large.min(half - 1)
            };
            out.push((side + bucket) as i64);
        }
    }
    out
}

/// Self-attention without biases or score scaling, plus the position bias.
struct T5Attention {
    heads: usize,
    d_kv: usize,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    /// Only the first block has it; every block adds the bias it computes.
    relative_attention_bias: Option<Embedding>,
    training: bool,
}

impl T5Attention {
    /// The normed states [B, T, d_model] attended with `bias` [1, heads, T, T].
    fn attend(&self, x: &Tensor, bias: &Tensor) -> Result<Tensor> {
        let &[b, t, _] = x.shape() else {
            unreachable!("the encoder checks its input");
        };
        let heads = |y: Tensor| -> Result<Tensor> {
            y.reshape_to(&[b, t, self.heads, self.d_kv])?
                .permute(&[0, 2, 1, 3])
        };
        let q = heads(self.q.forward(x)?)?;
        let k = heads(self.k.forward(x)?)?;
        let v = heads(self.v.forward(x)?)?;
        // transformers takes the softmax in f32 and rounds back.
        let scores = q
            .matmul(&k.transpose(2, 3)?)?
            .to_dtype(DType::F32)?
            .add(bias)?;
        let p = scores.softmax(-1)?.to_dtype(v.dtype())?;
        let out =
            p.matmul(&v)?
                .permute(&[0, 2, 1, 3])?
                .reshape_to(&[b, t, self.heads * self.d_kv])?;
        self.o.forward(&out)
    }
}

impl Module for T5Attention {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let t = x.shape().get(1).copied().unwrap_or(0);
        // Alone, without the encoder's position bias.
        let zeros = Tensor::zeros(&[1, self.heads, t, t], DType::F32, x.device())?;
        self.attend(x, &zeros)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("q".into(), &self.q),
            ("k".into(), &self.k),
            ("v".into(), &self.v),
            ("o".into(), &self.o),
        ];
        if let Some(r) = &self.relative_attention_bias {
            c.push(("relative_attention_bias".into(), r));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.q, &mut self.k, &mut self.v, &mut self.o];
        if let Some(r) = &mut self.relative_attention_bias {
            c.push(r);
        }
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "T5Attention".into()
    }
}

/// `DenseReluDense` (wi, wo) or `DenseGatedActDense` (wi_0 activated, times wi_1, then wo).
struct T5FeedForward {
    wi: Linear,
    /// The gated form's linear branch (`wi_1`); `wi` is then `wi_0`.
    wi_1: Option<Linear>,
    wo: Linear,
    activation: crate::nn::Activation,
    training: bool,
}

impl Module for T5FeedForward {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.activation.apply(&self.wi.forward(x)?)?;
        let h = match &self.wi_1 {
            Some(lin) => h.mul(&lin.forward(x)?)?,
            None => h,
        };
        self.wo.forward(&h)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        match &self.wi_1 {
            Some(wi_1) => vec![
                ("wi_0".into(), &self.wi as &dyn Module),
                ("wi_1".into(), wi_1),
                ("wo".into(), &self.wo),
            ],
            None => vec![
                ("wi".into(), &self.wi as &dyn Module),
                ("wo".into(), &self.wo),
            ],
        }
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.wi];
        if let Some(l) = &mut self.wi_1 {
            c.push(l);
        }
        c.push(&mut self.wo);
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        match self.wi_1 {
            Some(_) => "T5DenseGatedActDense".into(),
            None => "T5DenseActDense".into(),
        }
    }
}

/// One block: x + attention(norm(x)), then x + feed_forward(norm(x)).
struct T5Block {
    attention_norm: RmsNorm,
    attention: T5Attention,
    feed_forward_norm: RmsNorm,
    feed_forward: T5FeedForward,
    training: bool,
}

impl T5Block {
    fn new(config: &T5Config, first: bool, gen: &mut Generator) -> Result<T5Block> {
        let (d, inner) = (config.d_model, config.num_heads * config.d_kv);
        let lin = |i, o, gen: &mut Generator| Linear::new(i, o, false, gen);
        Ok(T5Block {
            attention_norm: RmsNorm::new(d, config.layer_norm_epsilon)?,
            attention: T5Attention {
                heads: config.num_heads,
                d_kv: config.d_kv,
                q: lin(d, inner, gen)?,
                k: lin(d, inner, gen)?,
                v: lin(d, inner, gen)?,
                o: lin(inner, d, gen)?,
                relative_attention_bias: match first {
                    true => Some(Embedding::new(
                        config.relative_attention_num_buckets,
                        config.num_heads,
                        gen,
                    )?),
                    false => None,
                },
                training: true,
            },
            feed_forward_norm: RmsNorm::new(d, config.layer_norm_epsilon)?,
            feed_forward: T5FeedForward {
                wi: lin(d, config.d_ff, gen)?,
                wi_1: match config.gated {
                    true => Some(lin(d, config.d_ff, gen)?),
                    false => None,
                },
                wo: lin(config.d_ff, d, gen)?,
                activation: config.activation,
                training: true,
            },
            training: true,
        })
    }

    fn run(&self, x: &Tensor, bias: &Tensor) -> Result<Tensor> {
        let h = self
            .attention
            .attend(&self.attention_norm.forward(x)?, bias)?
            .add(x)?;
        self.feed_forward
            .forward(&self.feed_forward_norm.forward(&h)?)?
            .add(&h)
    }
}

impl Module for T5Block {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let t = x.shape().get(1).copied().unwrap_or(0);
        // Alone, without the encoder's position bias.
        let zeros = Tensor::zeros(&[1, self.attention.heads, t, t], DType::F32, x.device())?;
        self.run(x, &zeros)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("layer.0.SelfAttention".into(), &self.attention),
            ("layer.0.layer_norm".into(), &self.attention_norm),
            ("layer.1.DenseReluDense".into(), &self.feed_forward),
            ("layer.1.layer_norm".into(), &self.feed_forward_norm),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![
            &mut self.attention,
            &mut self.attention_norm,
            &mut self.feed_forward,
            &mut self.feed_forward_norm,
        ]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "T5Block".into()
    }
}

/// transformers' `T5EncoderModel`: ids [B, T] → states [B, T, d_model].
pub struct T5EncoderModel {
    pub config: T5Config,
    shared: Embedding,
    blocks: Vec<T5Block>,
    final_layer_norm: RmsNorm,
    training: bool,
}

impl T5EncoderModel {
    pub fn new(config: T5Config, gen: &mut Generator) -> Result<T5EncoderModel> {
        Ok(T5EncoderModel {
            shared: Embedding::new(config.vocab_size, config.d_model, gen)?,
            blocks: (0..config.num_layers)
                .map(|i| T5Block::new(&config, i == 0, gen))
                .collect::<Result<_>>()?,
            final_layer_norm: RmsNorm::new(config.d_model, config.layer_norm_epsilon)?,
            config,
            training: true,
        })
    }

    /// A `save_pretrained` folder of a `T5EncoderModel` (or a whole T5's, whose decoder is left
    /// out): `config.json` and safetensors, the token embedding as `shared.weight` or
    /// `encoder.embed_tokens.weight`.
    pub fn from_folder(dir: &Path) -> Result<T5EncoderModel> {
        let json = read_config(dir)?;
        let f = Fields::new(&json, "T5EncoderModel");
        let in_dir = |e: Error| Error::format("T5EncoderModel", format!("{}: {e}", dir.display()));
        match f.string("model_type") {
            Some("t5") | Some("umt5") | None => {}
            Some(other) => {
                return Err(in_dir(
                    f.error(format!("model_type `{other}` is not a T5 encoder")),
                ))
            }
        }
        let config = T5Config::read(&f).map_err(in_dir)?;
        let mut weights = load_weights(dir)?;
        // The embedding and every block's products, before anything is allocated.
        let (d, inner) = (
            config.d_model as f64,
            (config.num_heads * config.d_kv) as f64,
        );
        let ff = config.d_ff as f64 * d * if config.gated { 3.0 } else { 2.0 };
        let at_least =
            config.vocab_size as f64 * d + config.num_layers as f64 * (4.0 * d * inner + ff);
        crate::models::diffusion::check_config_against_weights(
            "T5EncoderModel",
            at_least,
            &weights,
        )?;
        let model = T5EncoderModel::new(config, &mut Generator::new(0))?;
        weights.retain(|n, _| n.starts_with("encoder.") || n == "shared.weight");
        if let Some(tied) = weights.remove("encoder.embed_tokens.weight") {
            weights.entry("shared.weight".into()).or_insert(tied);
        }
        model.load_state_dict(&weights, true).map_err(in_dir)?;
        Ok(model)
    }

    /// The position bias [1, heads, T, T] (F32) of a T-token input.
    fn position_bias(&self, t: usize, device: crate::Device) -> Result<Tensor> {
        let table = self.blocks[0]
            .attention
            .relative_attention_bias
            .as_ref()
            .expect("the first block holds the relative attention bias");
        let buckets = relative_position_buckets(
            t,
            t,
            self.config.relative_attention_num_buckets,
            self.config.relative_attention_max_distance,
        );
        let ids = Tensor::from_vec(buckets, &[t, t])?.to_device(device)?;
        table
            .forward(&ids)?
            .to_dtype(DType::F32)?
            .permute(&[2, 0, 1])?
            .unsqueeze(0)
    }
}

impl Module for T5EncoderModel {
    /// ids [B, T] → the final norm's states [B, T, d_model] (`last_hidden_state`).
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        if ids.rank() != 2 || ids.dtype().is_float() || ids.shape()[1] == 0 {
            return Err(Error::layer_input(
                "T5EncoderModel",
                "integer ids [B, T] with T > 0",
                format!("{} {:?}", ids.dtype(), ids.shape()),
            ));
        }
        let bias = self.position_bias(ids.shape()[1], self.shared.weight.device())?;
        let mut h = self
            .shared
            .forward(&ids.to_device(self.shared.weight.device())?)?;
        for block in &self.blocks {
            h = block.run(&h, &bias)?;
        }
        self.final_layer_norm.forward(&h)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![("shared".into(), &self.shared)];
        c.extend(
            self.blocks
                .iter()
                .enumerate()
                .map(|(i, b)| (format!("encoder.block.{i}"), b as &dyn Module)),
        );
        c.push(("encoder.final_layer_norm".into(), &self.final_layer_norm));
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.shared];
        c.extend(self.blocks.iter_mut().map(|b| b as &mut dyn Module));
        c.push(&mut self.final_layer_norm);
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "T5EncoderModel".into()
    }
}
