//! `SiglipConfig` as transformers reads `config.json`: the text and vision towers under
//! `text_config` and `vision_config`, with transformers' defaults (SigLIP base, patch 16, 224²).

use crate::models::clip::config::{ClipTextConfig, ClipVisionConfig, TextPooling, TowerConfig};
use crate::models::hf_config::Fields;
use crate::nn::Activation;
use crate::Result;
use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
pub struct SiglipConfig {
    /// Bidirectional, pooled at the last position, then `head` to `projection_size`.
    pub text: ClipTextConfig,
    pub vision: ClipVisionConfig,
    /// The vision tower's attention-pooling head (`vision_use_head`).
    pub vision_head: bool,
}

/// Both towers' encoder defaults.
fn tower_defaults() -> TowerConfig {
    TowerConfig {
        hidden_size: 768,
        intermediate_size: 3072,
        num_hidden_layers: 12,
        num_attention_heads: 12,
        hidden_act: Activation::GeluTanh,
        layer_norm_eps: 1e-6,
    }
}

impl SiglipConfig {
    pub fn from_json(v: &Value) -> Result<SiglipConfig> {
        let f = Fields::new(v, "SigLIP");
        if let Some(kind) = f.string("model_type").filter(|k| *k != "siglip") {
            return Err(f.error(format!("model_type `{kind}` is not siglip")));
        }
        let t = f.nested("text_config", "SigLIP text_config")?;
        let vf = f.nested("vision_config", "SigLIP vision_config")?;
        let text_tower = TowerConfig::read(&t, tower_defaults())?;
        let text = ClipTextConfig {
            vocab_size: t.size("vocab_size", 32000)?,
            max_position_embeddings: t.size("max_position_embeddings", 64)?,
            pooling: TextPooling::Last,
            causal: false,
            head: Some(t.size("projection_size", text_tower.hidden_size)?),
            tower: text_tower,
        };
        let vision = ClipVisionConfig {
            tower: TowerConfig::read(&vf, tower_defaults())?,
            image_size: vf.size("image_size", 224)?,
            patch_size: vf.size("patch_size", 16)?,
            num_channels: vf.size("num_channels", 3)?,
        };
        text.tower.block(false).check("SigLIP text_config")?;
        vision.tower.block(false).check("SigLIP vision_config")?;
        Ok(SiglipConfig {
            text,
            vision_head: vf.flag("vision_use_head", true)?,
            vision,
        })
    }
}
