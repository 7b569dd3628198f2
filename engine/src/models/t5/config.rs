//! `T5Config` as transformers reads it for the encoder.

use crate::models::hf_config::Fields;
use crate::nn::Activation;
use crate::Result;

#[derive(Clone, Debug, PartialEq)]
pub struct T5Config {
    pub vocab_size: usize,
    pub d_model: usize,
    /// The width of one head (not d_model / num_heads in general).
    pub d_kv: usize,
    pub d_ff: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub relative_attention_num_buckets: usize,
    pub relative_attention_max_distance: usize,
    pub layer_norm_epsilon: f64,
    /// The feed-forward's activation, and whether it gates (`gated-gelu`: act(wi_0 x) · wi_1 x).
    pub activation: Activation,
    pub gated: bool,
}

impl T5Config {
    /// From a `config.json` of `model_type` t5 (or umt5's fields, which are the same).
    pub fn read(f: &Fields) -> Result<T5Config> {
        // transformers: "gated-gelu" is gelu_new gated; otherwise "[gated-]act".
        let proj = f.string("feed_forward_proj").unwrap_or("relu");
        let (gated, act) = match proj.strip_prefix("gated-") {
            Some(act) => (true, act),
            None => (false, proj),
        };
        let activation = match act {
            "gelu" if gated => Activation::GeluTanh,
            "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
            other => Activation::parse(other)
                .ok_or_else(|| f.error(format!("feed_forward_proj `{proj}` is not supported")))?,
        };
        let num_buckets = f.size("relative_attention_num_buckets", 32)?;
        let max_distance = f.size("relative_attention_max_distance", 128)?;
        // Bidirectional buckets: half for each sign, half of those exact.
        if num_buckets < 4 || max_distance <= num_buckets / 4 {
            return Err(f.error(format!(
                "relative_attention_num_buckets {num_buckets} and relative_attention_max_distance {max_distance} leave no logarithmic buckets"
            )));
        }
        Ok(T5Config {
            vocab_size: f.size("vocab_size", 32128)?,
            d_model: f.size("d_model", 512)?,
            d_kv: f.size("d_kv", 64)?,
            d_ff: f.size("d_ff", 2048)?,
            num_layers: f.size("num_layers", 6)?,
            num_heads: f.size("num_heads", 8)?,
            relative_attention_num_buckets: num_buckets,
            relative_attention_max_distance: max_distance,
            layer_norm_epsilon: f.float("layer_norm_epsilon", 1e-6)?,
            activation,
            gated,
        })
    }
}
