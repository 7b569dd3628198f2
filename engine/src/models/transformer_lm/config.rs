//! The configuration of a LLaMA-family decoder. It reads and writes Hugging Face's
//! `config.json` field names (`hidden_size`, `num_key_value_heads`, ...), so a checkpoint's
//! config maps one to one onto `transformers.LlamaConfig`.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LmConfig {
    pub vocab_size: usize,
    #[serde(rename = "hidden_size")]
    pub d_model: usize,
    #[serde(rename = "num_hidden_layers")]
    pub n_layers: usize,
    #[serde(rename = "num_attention_heads")]
    pub n_heads: usize,
    #[serde(rename = "num_key_value_heads")]
    pub n_kv_heads: usize,
    /// SwiGLU hidden width.
    #[serde(rename = "intermediate_size")]
    pub ffn_hidden: usize,
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    #[serde(rename = "max_position_embeddings")]
    pub max_seq_len: usize,
    #[serde(rename = "rms_norm_eps", default = "default_norm_eps")]
    pub norm_eps: f64,
    /// The output projection reuses the token embedding (no `lm_head.weight`).
    #[serde(rename = "tie_word_embeddings", default)]
    pub tied_embeddings: bool,
    /// Drops the causal mask: every position sees the whole sequence (masked-LM shape).
    #[serde(default)]
    pub bidirectional: bool,
    /// Std of the normal init of every projection and the embedding (HF `initializer_range`).
    #[serde(rename = "initializer_range", default = "default_init_std")]
    pub init_std: f64,
}

/// Ceilings of `validate`, each well above the largest released model (Llama 3 405B: width
/// 16384, 126 layers, FFN 53248, vocab 128256; the widest vocabularies are about 1M).
const MAX_VOCAB: usize = 1 << 24;
const MAX_WIDTH: usize = 1 << 18;
const MAX_FFN: usize = 1 << 20;
const MAX_LAYERS: usize = 1 << 12;
/// Positions only bound the caches and rotary tables a run asks for, which are sized by use.
const MAX_POSITIONS: usize = 1 << 30;

fn default_rope_theta() -> f64 {
    10000.0
}
fn default_norm_eps() -> f64 {
    1e-5
}
fn default_init_std() -> f64 {
    0.02
}

impl LmConfig {
    /// A small config with the common defaults; callers set the sizes they care about.
    pub fn new(vocab_size: usize, d_model: usize, n_layers: usize, n_heads: usize) -> Self {
        LmConfig {
            vocab_size,
            d_model,
            n_layers,
            n_heads,
            n_kv_heads: n_heads,
            ffn_hidden: swiglu_hidden(d_model),
            rope_theta: default_rope_theta(),
            max_seq_len: 1024,
            norm_eps: default_norm_eps(),
            tied_embeddings: true,
            bidirectional: false,
            init_std: default_init_std(),
        }
    }

    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads
    }

    /// Query heads per key/value head.
    pub fn group_size(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }

    /// Every size the model needs, checked at once so the error lists what is wrong. Each
    /// size also has a ceiling far above any published model, so a corrupt `config.json`
    /// (`hidden_size` = 2^53) is refused before it sizes anything.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        for (name, v, max) in [
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            ("d_model", self.d_model, MAX_WIDTH),
            ("layers", self.n_layers, MAX_LAYERS),
            ("heads", self.n_heads, MAX_WIDTH),
            ("kv_heads", self.n_kv_heads, MAX_WIDTH),
            ("ffn_hidden", self.ffn_hidden, MAX_FFN),
            ("max_seq_len", self.max_seq_len, MAX_POSITIONS),
        ] {
            if v == 0 {
                problems.push(format!("{name} must be positive"));
            } else if v > max {
                problems.push(format!("{name} {v} is above the limit {max}"));
            }
        }
        if self.n_heads > 0 && !self.d_model.is_multiple_of(self.n_heads) {
            problems.push(format!(
                "d_model {} is not a multiple of heads {}",
                self.d_model, self.n_heads
            ));
        }
        if self.n_heads > 0
            && self.d_model.is_multiple_of(self.n_heads)
            && !self.head_dim().is_multiple_of(2)
        {
            problems.push(format!(
                "head dim {} must be even for rotary embeddings",
                self.head_dim()
            ));
        }
        if self.n_kv_heads > 0 && !self.n_heads.is_multiple_of(self.n_kv_heads) {
            problems.push(format!(
                "heads {} is not a multiple of kv_heads {}",
                self.n_heads, self.n_kv_heads
            ));
        }
        if !(self.rope_theta > 0.0 && self.rope_theta.is_finite()) {
            problems.push(format!(
                "rope_theta must be positive, got {}",
                self.rope_theta
            ));
        }
        if !(self.norm_eps > 0.0 && self.norm_eps.is_finite()) {
            problems.push(format!("norm_eps must be positive, got {}", self.norm_eps));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid("TransformerLm config", problems.join("; ")))
        }
    }

    /// The config as Hugging Face writes `config.json` for `LlamaForCausalLM`.
    pub fn to_hf_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert("model_type".into(), "llama".into());
            m.insert(
                "architectures".into(),
                serde_json::json!(["LlamaForCausalLM"]),
            );
            m.insert("hidden_act".into(), "silu".into());
            m.insert("attention_bias".into(), false.into());
            m.insert("mlp_bias".into(), false.into());
        }
        v
    }

    /// Reads a config written by `to_hf_json` or by `transformers` (unknown fields are ignored,
    /// but a LLaMA feature this model lacks is refused rather than silently dropped).
    pub fn from_json(text: &str) -> Result<Self> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| Error::format("model config", e.to_string()))?;
        for (field, ok) in [
            ("attention_bias", serde_json::Value::Bool(false)),
            ("mlp_bias", serde_json::Value::Bool(false)),
            ("hidden_act", serde_json::Value::String("silu".into())),
        ] {
            if let Some(v) = value.get(field) {
                if *v != ok {
                    return Err(Error::format(
                        "model config",
                        format!("{field} = {v} is not supported (only {ok})"),
                    ));
                }
            }
        }
        if let Some(s) = value.get("rope_scaling").filter(|s| !s.is_null()) {
            return Err(Error::format(
                "model config",
                format!("rope_scaling {s} is not supported"),
            ));
        }
        let mut config: LmConfig = serde_json::from_value(value.clone())
            .map_err(|e| Error::format("model config", e.to_string()))?;
        // transformers leaves num_key_value_heads out when it equals the head count.
        if value.get("num_key_value_heads").is_none_or(|v| v.is_null()) {
            config.n_kv_heads = config.n_heads;
        }
        config.validate()?;
        Ok(config)
    }
}

/// LLaMA's SwiGLU width: 8/3 of d_model rounded up to a multiple of 64.
pub fn swiglu_hidden(d_model: usize) -> usize {
    (8 * d_model / 3).div_ceil(64) * 64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_through_hugging_face_field_names() {
        let mut c = LmConfig::new(100, 64, 2, 4);
        c.n_kv_heads = 2;
        let json = c.to_hf_json();
        assert_eq!(json["hidden_size"], 64);
        assert_eq!(json["num_key_value_heads"], 2);
        assert_eq!(json["model_type"], "llama");
        assert_eq!(LmConfig::from_json(&json.to_string()).unwrap(), c);
    }

    #[test]
    fn validate_names_every_bad_size() {
        let mut c = LmConfig::new(100, 60, 2, 8);
        c.n_kv_heads = 3;
        let msg = c.validate().unwrap_err().to_string();
        assert!(
            msg.contains("d_model 60 is not a multiple of heads 8"),
            "{msg}"
        );
        assert!(
            msg.contains("heads 8 is not a multiple of kv_heads 3"),
            "{msg}"
        );
    }

    #[test]
    fn sizes_far_beyond_any_model_are_refused() {
        let mut json = LmConfig::new(10, 8, 1, 2).to_hf_json();
        json["hidden_size"] = (1u64 << 53).into();
        json["num_hidden_layers"] = (1u64 << 53).into();
        json["max_position_embeddings"] = (1u64 << 40).into();
        let msg = LmConfig::from_json(&json.to_string())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("d_model 9007199254740992 is above"), "{msg}");
        assert!(msg.contains("layers 9007199254740992 is above"), "{msg}");
        assert!(msg.contains("max_seq_len 1099511627776 is above"), "{msg}");
    }

    #[test]
    fn from_json_refuses_features_the_model_lacks() {
        let mut json = LmConfig::new(10, 8, 1, 2).to_hf_json();
        json["attention_bias"] = true.into();
        let msg = LmConfig::from_json(&json.to_string())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("attention_bias"), "{msg}");
    }
}
