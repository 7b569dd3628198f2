//! `CLIPConfig` as transformers reads `config.json`: the text and vision towers' configs nested
//! under `text_config` and `vision_config`, each with transformers' defaults (ViT-B/32's).

use crate::models::encoder_block::BlockConfig;
use crate::models::hf_config::Fields;
use crate::nn::Activation;
use crate::Result;
use serde_json::Value;

/// What the two towers share: the encoder's sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct TowerConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub hidden_act: Activation,
    pub layer_norm_eps: f64,
}

impl TowerConfig {
    pub fn read(f: &Fields, defaults: TowerConfig) -> Result<TowerConfig> {
        Ok(TowerConfig {
            hidden_size: f.size("hidden_size", defaults.hidden_size)?,
            intermediate_size: f.size("intermediate_size", defaults.intermediate_size)?,
            num_hidden_layers: f.size("num_hidden_layers", defaults.num_hidden_layers)?,
            num_attention_heads: f.size("num_attention_heads", defaults.num_attention_heads)?,
            hidden_act: f.activation("hidden_act", defaults.hidden_act)?,
            layer_norm_eps: f.float("layer_norm_eps", defaults.layer_norm_eps)?,
        })
    }

    pub fn block(&self, causal: bool) -> BlockConfig {
        BlockConfig {
            width: self.hidden_size,
            heads: self.num_attention_heads,
            mlp_width: self.intermediate_size,
            act: self.hidden_act,
            eps: self.layer_norm_eps,
            qkv_bias: true,
            causal,
        }
    }
}

/// Which row of a text tower's output is the text's embedding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TextPooling {
    /// CLIP: the first end token. The legacy id 2 (configs from before transformers#24773)
    /// means "the highest id", which was the end token then.
    EndToken(u32),
    /// SigLIP: the last position (texts are padded to the full context).
    Last,
}

/// A text tower: CLIP's (causal, pooled at the end token) or SigLIP's (bidirectional, pooled
/// at the last position, then a `head` projection).
#[derive(Clone, Debug, PartialEq)]
pub struct ClipTextConfig {
    pub tower: TowerConfig,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    pub pooling: TextPooling,
    pub causal: bool,
    /// SigLIP's `head` Linear width (`projection_size`); CLIP projects outside the tower.
    pub head: Option<usize>,
}

impl ClipTextConfig {
    /// CLIP's text tower from its fields (`text_config`, or a `CLIPTextModel`'s whole
    /// config), with transformers' defaults.
    pub fn read(t: &Fields) -> Result<ClipTextConfig> {
        Ok(ClipTextConfig {
            tower: TowerConfig::read(
                t,
                TowerConfig {
                    hidden_size: 512,
                    intermediate_size: 2048,
                    num_hidden_layers: 12,
                    num_attention_heads: 8,
                    hidden_act: Activation::QuickGelu,
                    layer_norm_eps: 1e-5,
                },
            )?,
            vocab_size: t.size("vocab_size", 49408)?,
            max_position_embeddings: t.size("max_position_embeddings", 77)?,
            pooling: TextPooling::EndToken(t.id("eos_token_id", 49407)?),
            causal: true,
            head: None,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ClipVisionConfig {
    pub tower: TowerConfig,
    pub image_size: usize,
    pub patch_size: usize,
    pub num_channels: usize,
}

impl ClipVisionConfig {
    pub fn grid(&self) -> usize {
        self.image_size / self.patch_size
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ClipConfig {
    pub text: ClipTextConfig,
    pub vision: ClipVisionConfig,
    /// The joint embedding's width.
    pub projection_dim: usize,
    /// `logit_scale`'s initial value (log of the inverse temperature).
    pub logit_scale_init_value: f64,
}

impl ClipConfig {
    pub fn from_json(v: &Value) -> Result<ClipConfig> {
        let f = Fields::new(v, "CLIP");
        if let Some(kind) = f.string("model_type").filter(|k| *k != "clip") {
            return Err(f.error(format!("model_type `{kind}` is not clip")));
        }
        let t = f.nested("text_config", "CLIP text_config")?;
        let vf = f.nested("vision_config", "CLIP vision_config")?;
        let text = ClipTextConfig::read(&t)?;
        let vision = ClipVisionConfig {
            tower: TowerConfig::read(
                &vf,
                TowerConfig {
                    hidden_size: 768,
                    intermediate_size: 3072,
                    num_hidden_layers: 12,
                    num_attention_heads: 12,
                    hidden_act: Activation::QuickGelu,
                    layer_norm_eps: 1e-5,
                },
            )?,
            image_size: vf.size("image_size", 224)?,
            patch_size: vf.size("patch_size", 32)?,
            num_channels: vf.size("num_channels", 3)?,
        };
        text.tower.block(text.causal).check("CLIP text_config")?;
        vision.tower.block(false).check("CLIP vision_config")?;
        Ok(ClipConfig {
            text,
            vision,
            projection_dim: f.size("projection_dim", 512)?,
            logit_scale_init_value: f.float("logit_scale_init_value", 2.6592)?,
        })
    }
}
