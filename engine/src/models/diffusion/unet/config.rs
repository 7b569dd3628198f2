//! A UNet's `config.json`: the block layout, per-block values and what is refused by name.

use crate::models::hf_config::Fields;
use crate::{Error, Result};
use serde_json::Value;

/// A block's attention: none, self-attention over the map (UNet2DModel), or a transformer
/// with cross-attention (UNet2DConditionModel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKind {
    None,
    Spatial,
    Cross,
}

impl AttentionKind {
    fn of_down(name: &str) -> Option<AttentionKind> {
        match name {
            "DownBlock2D" => Some(AttentionKind::None),
            "AttnDownBlock2D" => Some(AttentionKind::Spatial),
            "CrossAttnDownBlock2D" => Some(AttentionKind::Cross),
            _ => None,
        }
    }

    fn of_up(name: &str) -> Option<AttentionKind> {
        match name {
            "UpBlock2D" => Some(AttentionKind::None),
            "AttnUpBlock2D" => Some(AttentionKind::Spatial),
            "CrossAttnUpBlock2D" => Some(AttentionKind::Cross),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct UNetConfig {
    /// `UNet2DConditionModel` (text-conditioned) or `UNet2DModel`.
    pub conditional: bool,
    pub in_channels: usize,
    pub out_channels: usize,
    pub block_out_channels: Vec<usize>,
    pub down: Vec<AttentionKind>,
    pub up: Vec<AttentionKind>,
    /// The middle's attention (`None` for no middle block at all is refused).
    pub mid: AttentionKind,
    pub layers_per_block: usize,
    pub norm_num_groups: usize,
    pub norm_eps: f64,
    pub flip_sin_to_cos: bool,
    pub freq_shift: f64,
    pub downsample_padding: usize,
    /// Attention heads per block (down order); the middle uses the last.
    pub heads: Vec<usize>,
    /// Transformer blocks per attention, per block (down order).
    pub transformer_layers: Vec<usize>,
    pub cross_attention_dim: usize,
    pub use_linear_projection: bool,
    pub center_input_sample: bool,
    /// SDXL's added conditioning (`addition_embed_type: "text_time"`).
    pub text_time: Option<TextTime>,
}

/// SDXL's `text_time` conditioning: the pooled text embedding and the six size numbers
/// (original size, crop corner, target size), each number embedded sinusoidally in
/// `time_embed_dim` channels, concatenated and sent through an MLP into the time embedding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TextTime {
    /// `addition_time_embed_dim`: channels of each size number's embedding.
    pub time_embed_dim: usize,
    /// `projection_class_embeddings_input_dim`: the MLP's input, the pooled text width plus
    /// six embedded numbers.
    pub input_dim: usize,
}

impl TextTime {
    /// The width of the pooled text embedding the UNet takes.
    pub fn text_embeds_dim(&self) -> usize {
        self.input_dim - 6 * self.time_embed_dim
    }
}

/// `addition_embed_type`: none, or SDXL's `text_time` with its two sizes.
fn text_time(f: &Fields, v: &Value) -> Result<Option<TextTime>> {
    match v.get("addition_embed_type").and_then(Value::as_str) {
        None => {
            if v.get("projection_class_embeddings_input_dim")
                .is_some_and(|x| !x.is_null())
            {
                return Err(f.error(
                    "projection_class_embeddings_input_dim without addition_embed_type is not supported"
                        .into(),
                ));
            }
            Ok(None)
        }
        Some("text_time") => {
            let tt = TextTime {
                time_embed_dim: f.size("addition_time_embed_dim", 256)?,
                input_dim: f.size("projection_class_embeddings_input_dim", 2816)?,
            };
            if tt.input_dim <= 6 * tt.time_embed_dim {
                return Err(f.error(format!(
                    "projection_class_embeddings_input_dim {} leaves no room for the text embedding beside 6 x addition_time_embed_dim {}",
                    tt.input_dim, tt.time_embed_dim
                )));
            }
            Ok(Some(tt))
        }
        Some(other) => Err(f.error(format!(
            "addition_embed_type `{other}` is not supported (text_time, SDXL's, is)"
        ))),
    }
}

/// A list of per-block values given as one number or a list (`attention_head_dim: [5, 10,
/// 20, 20]`).
fn per_block(
    f: &Fields,
    v: &Value,
    key: &str,
    default: usize,
    blocks: usize,
) -> Result<Vec<usize>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(vec![default; blocks]),
        Some(Value::Array(list)) => {
            let out: Option<Vec<usize>> = list
                .iter()
                .map(|x| {
                    x.as_u64()
                        .filter(|&n| n > 0 && n <= 1 << 16)
                        .map(|n| n as usize)
                })
                .collect();
            match out {
                Some(o) if o.len() == blocks => Ok(o),
                _ => Err(f.error(format!(
                    "`{key}` must be one size or {blocks}, got {}",
                    v[key]
                ))),
            }
        }
        Some(_) => Ok(vec![f.size(key, default)?; blocks]),
    }
}

fn block_types(
    f: &Fields,
    v: &Value,
    key: &str,
    blocks: usize,
    parse: fn(&str) -> Option<AttentionKind>,
) -> Result<Vec<AttentionKind>> {
    let list = v
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| f.error(format!("`{key}` is missing")))?;
    if list.len() != blocks {
        return Err(f.error(format!(
            "{key} lists {} blocks for {blocks} block_out_channels",
            list.len()
        )));
    }
    list.iter()
        .map(|t| {
            t.as_str()
                .and_then(parse)
                .ok_or_else(|| f.error(format!("{key}: {t} is not supported")))
        })
        .collect()
}

impl UNetConfig {
    pub fn from_json(v: &Value) -> Result<UNetConfig> {
        let class = v.get("_class_name").and_then(Value::as_str);
        let conditional = match class {
            Some("UNet2DConditionModel") => true,
            Some("UNet2DModel") => false,
            None => v.get("cross_attention_dim").is_some(),
            Some(other) => {
                return Err(Error::format(
                    "UNet",
                    format!("config.json: `{other}` is not supported (UNet2DModel and UNet2DConditionModel are)"),
                ))
            }
        };
        let f = Fields::new(
            v,
            if conditional {
                "UNet2DConditionModel"
            } else {
                "UNet2DModel"
            },
        );
        // What these UNets do not do: refused by name, never skipped.
        for key in [
            "class_embed_type",
            "time_cond_proj_dim",
            "encoder_hid_dim",
            "num_class_embeds",
            "reverse_transformer_layers_per_block",
        ] {
            if v.get(key).is_some_and(|x| !x.is_null()) {
                return Err(f.error(format!("{key} is not supported yet")));
            }
        }
        for key in [
            "only_cross_attention",
            "dual_cross_attention",
            "class_embeddings_concat",
        ] {
            if v.get(key)
                .is_some_and(|x| x.as_bool() == Some(true) || x.is_array())
            {
                return Err(f.error(format!("{key} is not supported")));
            }
        }
        f.choice("act_fn", "silu", &["silu"])?;
        f.choice("time_embedding_type", "positional", &["positional"])?;
        f.choice("resnet_time_scale_shift", "default", &["default"])?;
        for key in ["conv_in_kernel", "conv_out_kernel"] {
            if f.size(key, 3)? != 3 {
                return Err(f.error(format!("{key} other than 3 is not supported")));
            }
        }
        for key in ["mid_block_scale_factor", "resnet_out_scale_factor"] {
            if f.float(key, 1.0)? != 1.0 {
                return Err(f.error(format!("{key} other than 1 is not supported")));
            }
        }
        let channels = match v.get("block_out_channels").and_then(Value::as_array) {
            Some(list) if !list.is_empty() && list.len() <= 8 => list
                .iter()
                .map(|c| {
                    c.as_u64()
                        .filter(|&c| c > 0 && c <= 1 << 16)
                        .map(|c| c as usize)
                })
                .collect::<Option<Vec<_>>>(),
            _ => None,
        }
        .ok_or_else(|| f.error("`block_out_channels` must be 1 to 8 channel counts".into()))?;
        let n = channels.len();
        if v.get("layers_per_block").is_some_and(Value::is_array) {
            return Err(f.error("a list of layers_per_block is not supported".into()));
        }
        let mid = match v.get("mid_block_type").and_then(Value::as_str) {
            None if conditional => AttentionKind::Cross,
            None => match f.flag("add_attention", true)? {
                true => AttentionKind::Spatial,
                false => AttentionKind::None,
            },
            Some("UNetMidBlock2DCrossAttn") => AttentionKind::Cross,
            Some("UNetMidBlock2D") => AttentionKind::Spatial,
            Some(other) => return Err(f.error(format!("mid_block_type {other} is not supported"))),
        };
        let heads = match conditional {
            // UNet2DConditionModel's `attention_head_dim` is the number of heads (diffusers
            // keeps the old name); `num_attention_heads` overrides it.
            true => match v.get("num_attention_heads").filter(|x| !x.is_null()) {
                Some(_) => per_block(&f, v, "num_attention_heads", 8, n)?,
                None => per_block(&f, v, "attention_head_dim", 8, n)?,
            },
            // UNet2DModel's is the width of a head.
            false => {
                let width = per_block(&f, v, "attention_head_dim", 8, n)?;
                channels
                    .iter()
                    .zip(&width)
                    .map(|(c, w)| (c / w).max(1))
                    .collect()
            }
        };
        if v.get("cross_attention_dim").is_some_and(Value::is_array) {
            return Err(f.error("a list of cross_attention_dim is not supported".into()));
        }
        let config = UNetConfig {
            conditional,
            in_channels: f.size("in_channels", 4)?,
            out_channels: f.size("out_channels", 4)?,
            down: block_types(&f, v, "down_block_types", n, AttentionKind::of_down)?,
            up: block_types(&f, v, "up_block_types", n, AttentionKind::of_up)?,
            mid,
            block_out_channels: channels,
            layers_per_block: f.size("layers_per_block", 2)?,
            norm_num_groups: f.size("norm_num_groups", 32)?,
            norm_eps: f.float("norm_eps", 1e-5)?,
            flip_sin_to_cos: f.flag("flip_sin_to_cos", true)?,
            freq_shift: f.float("freq_shift", 0.0)?,
            downsample_padding: f.count("downsample_padding", 1)?,
            heads,
            transformer_layers: per_block(&f, v, "transformer_layers_per_block", 1, n)?,
            cross_attention_dim: f.size("cross_attention_dim", 1280)?,
            use_linear_projection: f.flag("use_linear_projection", false)?,
            center_input_sample: f.flag("center_input_sample", false)?,
            text_time: text_time(&f, v)?,
        };
        let cross = |k: &AttentionKind| *k == AttentionKind::Cross;
        if !conditional && (config.down.iter().any(cross) || config.up.iter().any(cross)) {
            return Err(f.error("UNet2DModel has no cross-attention blocks".into()));
        }
        super::super::check_groups(&f, &config.block_out_channels, config.norm_num_groups)?;
        Ok(config)
    }

    /// The config as diffusers writes it for this class, so `from_pretrained` reads it back.
    /// (With `text_time`, the SDXL fields too.)
    pub fn to_json(&self, sample_size: Option<usize>) -> Value {
        let down: Vec<&str> = self.down.iter().map(|k| down_title(*k)).collect();
        let up: Vec<&str> = self.up.iter().map(|k| up_title(*k)).collect();
        let mut v = serde_json::json!({
            "_class_name": if self.conditional { "UNet2DConditionModel" } else { "UNet2DModel" },
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "block_out_channels": self.block_out_channels,
            "down_block_types": down,
            "up_block_types": up,
            "layers_per_block": self.layers_per_block,
            "norm_num_groups": self.norm_num_groups,
            "norm_eps": self.norm_eps,
            "flip_sin_to_cos": self.flip_sin_to_cos,
            "freq_shift": self.freq_shift,
            "downsample_padding": self.downsample_padding,
            "center_input_sample": self.center_input_sample,
            "act_fn": "silu",
        });
        if let Some(s) = sample_size {
            v["sample_size"] = s.into();
        }
        if self.conditional {
            v["mid_block_type"] = match self.mid {
                AttentionKind::Cross => "UNetMidBlock2DCrossAttn",
                _ => "UNetMidBlock2D",
            }
            .into();
            v["attention_head_dim"] = self.heads.clone().into();
            v["transformer_layers_per_block"] = self.transformer_layers.clone().into();
            v["cross_attention_dim"] = self.cross_attention_dim.into();
            v["use_linear_projection"] = self.use_linear_projection.into();
            if let Some(tt) = self.text_time {
                v["addition_embed_type"] = "text_time".into();
                v["addition_time_embed_dim"] = tt.time_embed_dim.into();
                v["projection_class_embeddings_input_dim"] = tt.input_dim.into();
            }
        } else {
            // UNet2DModel reads a head's width; every block here has the same.
            let width = self.block_out_channels[0] / self.heads[0];
            v["attention_head_dim"] = width.into();
            v["add_attention"] = (self.mid != AttentionKind::None).into();
        }
        v
    }

    /// A lower bound of the parameter count: the 3x3 convolutions of the resnets and the
    /// attention projections (what grows with every size in the config).
    pub fn parameters_at_least(&self) -> f64 {
        let blocks = self.block_out_channels.len();
        let mut n = 0.0;
        for (i, &c) in self.block_out_channels.iter().enumerate() {
            let c = c as f64;
            let attn = match (self.down[i], self.up[blocks - 1 - i]) {
                (AttentionKind::None, AttentionKind::None) => 0.0,
                _ => 4.0 * c * c * self.transformer_layers[i] as f64,
            };
            // Down: layers resnets of two convs; up: one more each.
            let resnets = (2 * self.layers_per_block + 1) as f64;
            n += resnets * (18.0 * c * c + attn);
        }
        n
    }

    /// The sample's sides must be multiples of this.
    pub fn downscale(&self) -> usize {
        1 << (self.block_out_channels.len() - 1)
    }
}

pub(super) fn down_title(k: AttentionKind) -> &'static str {
    match k {
        AttentionKind::None => "DownBlock2D",
        AttentionKind::Spatial => "AttnDownBlock2D",
        AttentionKind::Cross => "CrossAttnDownBlock2D",
    }
}

pub(super) fn up_title(k: AttentionKind) -> &'static str {
    match k {
        AttentionKind::None => "UpBlock2D",
        AttentionKind::Spatial => "AttnUpBlock2D",
        AttentionKind::Cross => "CrossAttnUpBlock2D",
    }
}
