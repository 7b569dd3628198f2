//! `ViTConfig` (and DeiT's, the same fields) as transformers reads `config.json`, with its
//! defaults (ViT-B/16 at 224²).

use crate::models::hf_config::Fields;
use crate::nn::Activation;
use crate::Result;
use serde_json::Value;

/// Which of the two families the config describes: DeiT adds a distillation token after the
/// class token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    ViT,
    DeiT,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ViTConfig {
    pub variant: Variant,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: Activation,
    pub layer_norm_eps: f64,
    pub image_size: usize,
    pub patch_size: usize,
    pub num_channels: usize,
    pub qkv_bias: bool,
    /// `ViTModel`'s pooler width (`pooler_output_size`, the hidden size by default).
    pub pooler_output_size: usize,
    /// Class names by index (`id2label`); empty for a backbone without a classifier.
    pub labels: Vec<String>,
}

impl Default for ViTConfig {
    fn default() -> Self {
        ViTConfig {
            variant: Variant::ViT,
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: Activation::Gelu,
            layer_norm_eps: 1e-12,
            image_size: 224,
            patch_size: 16,
            num_channels: 3,
            qkv_bias: true,
            pooler_output_size: 768,
            labels: Vec::new(),
        }
    }
}

impl ViTConfig {
    pub fn from_json(v: &Value) -> Result<ViTConfig> {
        let d = ViTConfig::default();
        let f = Fields::new(v, "ViT");
        let variant = match f.string("model_type") {
            None | Some("vit") => Variant::ViT,
            Some("deit") => Variant::DeiT,
            Some(other) => return Err(f.error(format!("model_type `{other}` is not vit or deit"))),
        };
        if let Some(act) = f.string("pooler_act") {
            if act != "tanh" {
                return Err(f.error(format!("pooler_act `{act}` is not supported (only tanh)")));
            }
        }
        let hidden_size = f.size("hidden_size", d.hidden_size)?;
        let c = ViTConfig {
            variant,
            hidden_size,
            pooler_output_size: f.size("pooler_output_size", hidden_size)?,
            num_hidden_layers: f.size("num_hidden_layers", d.num_hidden_layers)?,
            num_attention_heads: f.size("num_attention_heads", d.num_attention_heads)?,
            intermediate_size: f.size("intermediate_size", d.intermediate_size)?,
            hidden_act: f.activation("hidden_act", d.hidden_act)?,
            layer_norm_eps: f.float("layer_norm_eps", d.layer_norm_eps)?,
            image_size: f.size("image_size", d.image_size)?,
            patch_size: f.size("patch_size", d.patch_size)?,
            num_channels: f.size("num_channels", d.num_channels)?,
            qkv_bias: f.flag("qkv_bias", true)?,
            labels: f.labels()?,
        };
        c.block().check("ViT")?;
        Ok(c)
    }

    /// `config.json` as transformers reads it back; `architecture` names the class.
    pub fn to_json(&self, architecture: &str) -> Value {
        let model_type = match self.variant {
            Variant::ViT => "vit",
            Variant::DeiT => "deit",
        };
        let mut v = serde_json::json!({
            "architectures": [architecture],
            "model_type": model_type,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act.hf_name(),
            "layer_norm_eps": self.layer_norm_eps,
            "image_size": self.image_size,
            "patch_size": self.patch_size,
            "num_channels": self.num_channels,
            "qkv_bias": self.qkv_bias,
            "pooler_output_size": self.pooler_output_size,
        });
        if !self.labels.is_empty() {
            let m = v.as_object_mut().expect("an object");
            let id2label: serde_json::Map<String, Value> = self
                .labels
                .iter()
                .enumerate()
                .map(|(i, l)| (i.to_string(), Value::from(l.as_str())))
                .collect();
            let label2id: serde_json::Map<String, Value> = self
                .labels
                .iter()
                .enumerate()
                .map(|(i, l)| (l.clone(), Value::from(i)))
                .collect();
            m.insert("id2label".into(), id2label.into());
            m.insert("label2id".into(), label2id.into());
        }
        v
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Token rows before the patches: [CLS], and DeiT's distillation token.
    pub fn extra_tokens(&self) -> usize {
        match self.variant {
            Variant::ViT => 1,
            Variant::DeiT => 2,
        }
    }

    /// The shared encoder block's sizes.
    pub fn block(&self) -> crate::models::encoder_block::BlockConfig {
        crate::models::encoder_block::BlockConfig {
            width: self.hidden_size,
            heads: self.num_attention_heads,
            mlp_width: self.intermediate_size,
            act: self.hidden_act,
            eps: self.layer_norm_eps,
            qkv_bias: self.qkv_bias,
            causal: false,
        }
    }

    /// Patches along each side of the configured image.
    pub fn grid(&self) -> usize {
        self.image_size / self.patch_size
    }
}
