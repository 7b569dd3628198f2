//! `Dinov2Config` and `Dinov2WithRegistersConfig` as transformers reads `config.json`, with
//! their defaults (ViT-B/14 at 224²).

use crate::models::encoder_block::BlockConfig;
use crate::models::hf_config::Fields;
use crate::nn::Activation;
use crate::Result;
use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
pub struct Dinov2Config {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// The MLP's width over the hidden size (`int(hidden_size * mlp_ratio)` features).
    pub mlp_ratio: f64,
    pub hidden_act: Activation,
    pub layer_norm_eps: f64,
    pub image_size: usize,
    pub patch_size: usize,
    pub num_channels: usize,
    pub qkv_bias: bool,
    /// LayerScale's initial value.
    pub layerscale_value: f64,
    /// Whether the embeddings hold a mask token (`use_mask_token`; the registers variant always
    /// does).
    pub mask_token: bool,
    /// Register tokens after [CLS] (`Dinov2WithRegistersModel`; 0 for `Dinov2Model`).
    pub registers: usize,
    /// Class names by index, for `Dinov2ForImageClassification`.
    pub labels: Vec<String>,
}

impl Dinov2Config {
    pub fn from_json(v: &Value) -> Result<Dinov2Config> {
        let f = Fields::new(v, "DINOv2");
        let with_registers = match f.string("model_type") {
            None | Some("dinov2") => false,
            Some("dinov2_with_registers") => true,
            Some(other) => {
                return Err(f.error(format!(
                    "model_type `{other}` is not dinov2 or dinov2_with_registers"
                )))
            }
        };
        if f.flag("use_swiglu_ffn", false)? {
            return Err(
                f.error("use_swiglu_ffn (the giant model's SwiGLU MLP) is not supported".into())
            );
        }
        let mlp_ratio = f.float("mlp_ratio", 4.0)?;
        if !(mlp_ratio > 0.0 && mlp_ratio <= 64.0) {
            return Err(f.error(format!("mlp_ratio {mlp_ratio} is not in (0, 64]")));
        }
        let c = Dinov2Config {
            hidden_size: f.size("hidden_size", 768)?,
            num_hidden_layers: f.size("num_hidden_layers", 12)?,
            num_attention_heads: f.size("num_attention_heads", 12)?,
            mlp_ratio,
            hidden_act: f.activation("hidden_act", Activation::Gelu)?,
            layer_norm_eps: f.float("layer_norm_eps", 1e-6)?,
            image_size: f.size("image_size", 224)?,
            patch_size: f.size("patch_size", if with_registers { 16 } else { 14 })?,
            num_channels: f.size("num_channels", 3)?,
            qkv_bias: f.flag("qkv_bias", true)?,
            layerscale_value: f.float("layerscale_value", 1.0)?,
            mask_token: with_registers || f.flag("use_mask_token", true)?,
            registers: match with_registers {
                true => f.size("num_register_tokens", 4)?,
                false => 0,
            },
            labels: f.labels()?,
        };
        c.block().check("DINOv2")?;
        Ok(c)
    }

    pub fn block(&self) -> BlockConfig {
        BlockConfig {
            width: self.hidden_size,
            heads: self.num_attention_heads,
            mlp_width: (self.hidden_size as f64 * self.mlp_ratio) as usize,
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
