//! diffusers' UNets with their parameter names: `UNet2DModel` (unconditional, self-attention
//! blocks: DDPM's) and `UNet2DConditionModel` (cross-attention to text states: Stable
//! Diffusion 1.x and 2.x shapes), configured from `config.json`.
//!
//! t → sinusoidal embedding → MLP (`time_embedding`) = temb
//! x → conv_in → down blocks (resnets with temb, attention, a stride-2 conv), every output
//! kept → middle (resnet, attention, resnet) → up blocks (each resnet takes the last kept
//! output concatenated on the channels, then attention; nearest ×2 and a conv) → GroupNorm →
//! SiLU → conv_out: the prediction (noise, v or the sample, as the scheduler's config says).

use super::blocks::{conv, Downsample, ResnetBlock, SpatialAttention, Upsample};
use super::transformer2d::Transformer2d;
use crate::io::pretrained::{load_weights_named, read_config};
use crate::models::hf_config::Fields;
use crate::nn::{Conv2d, GroupNorm, Linear, Module};
use crate::{DType, Error, Generator, Result, Tensor};
use serde_json::Value;
use std::path::Path;

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
            "addition_embed_type",
            "time_cond_proj_dim",
            "encoder_hid_dim",
            "num_class_embeds",
            "projection_class_embeddings_input_dim",
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
        };
        let cross = |k: &AttentionKind| *k == AttentionKind::Cross;
        if !conditional && (config.down.iter().any(cross) || config.up.iter().any(cross)) {
            return Err(f.error("UNet2DModel has no cross-attention blocks".into()));
        }
        super::check_groups(&f, &config.block_out_channels, config.norm_num_groups)?;
        Ok(config)
    }

    /// The config as diffusers writes it for this class, so `from_pretrained` reads it back.
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

/// One block's attention layer.
enum Attention {
    Spatial(Box<SpatialAttention>),
    Cross(Box<Transformer2d>),
}

impl Attention {
    fn new(
        kind: AttentionKind,
        c: &UNetConfig,
        channels: usize,
        block: usize,
        gen: &mut Generator,
    ) -> Result<Option<Attention>> {
        let heads = c.heads[block];
        Ok(match kind {
            AttentionKind::None => None,
            AttentionKind::Spatial => Some(Attention::Spatial(Box::new(SpatialAttention::new(
                channels,
                heads,
                c.norm_num_groups,
                c.norm_eps,
                gen,
            )?))),
            AttentionKind::Cross => Some(Attention::Cross(Box::new(Transformer2d::new(
                channels,
                heads,
                c.transformer_layers[block],
                c.cross_attention_dim,
                c.norm_num_groups,
                c.use_linear_projection,
                gen,
            )?))),
        })
    }

    fn run(&self, x: &Tensor, context: Option<&Tensor>) -> Result<Tensor> {
        match (self, context) {
            (Attention::Spatial(a), _) => a.forward(x),
            (Attention::Cross(t), Some(ctx)) => t.run(x, ctx),
            (Attention::Cross(_), None) => Err(Error::invalid(
                "UNet2DConditionModel",
                "the cross-attention blocks need the text states (encoder_hidden_states)",
            )),
        }
    }

    fn module(&self) -> &dyn Module {
        match self {
            Attention::Spatial(a) => a.as_ref(),
            Attention::Cross(t) => t.as_ref(),
        }
    }

    fn module_mut(&mut self) -> &mut dyn Module {
        match self {
            Attention::Spatial(a) => a.as_mut(),
            Attention::Cross(t) => t.as_mut(),
        }
    }
}

/// A down, middle or up block: resnets, each followed by its attention where the block has
/// one, then the resampler.
struct Block<R> {
    resnets: Vec<ResnetBlock>,
    attentions: Vec<Attention>,
    resample: Option<R>,
    /// `downsamplers` or `upsamplers`.
    resample_name: &'static str,
    title: &'static str,
    training: bool,
}

impl<R: Module> Block<R> {
    /// A down block: every resnet's (and the resampler's) output is kept for the up path.
    fn down(
        &self,
        x: &Tensor,
        temb: &Tensor,
        ctx: Option<&Tensor>,
        kept: &mut Vec<Tensor>,
    ) -> Result<Tensor> {
        let mut h = x.clone();
        for (i, r) in self.resnets.iter().enumerate() {
            h = r.forward_with(&h, Some(temb))?;
            if let Some(a) = self.attentions.get(i) {
                h = a.run(&h, ctx)?;
            }
            kept.push(h.clone());
        }
        if let Some(s) = &self.resample {
            h = s.forward(&h)?;
            kept.push(h.clone());
        }
        Ok(h)
    }

    /// An up block: each resnet first takes the newest kept output beside its input.
    fn up(
        &self,
        x: &Tensor,
        temb: &Tensor,
        ctx: Option<&Tensor>,
        kept: &mut Vec<Tensor>,
    ) -> Result<Tensor> {
        let mut h = x.clone();
        for (i, r) in self.resnets.iter().enumerate() {
            let skip = kept
                .pop()
                .ok_or_else(|| Error::invalid("UNet", "the up path ran out of skip connections"))?;
            h = r.forward_with(&Tensor::cat(&[h, skip], 1)?, Some(temb))?;
            if let Some(a) = self.attentions.get(i) {
                h = a.run(&h, ctx)?;
            }
        }
        match &self.resample {
            Some(s) => s.forward(&h),
            None => Ok(h),
        }
    }

    /// The middle: resnet, then (attention, resnet) pairs.
    fn middle(&self, x: &Tensor, temb: &Tensor, ctx: Option<&Tensor>) -> Result<Tensor> {
        let mut h = self.resnets[0].forward_with(x, Some(temb))?;
        for (i, r) in self.resnets[1..].iter().enumerate() {
            if let Some(a) = self.attentions.get(i) {
                h = a.run(&h, ctx)?;
            }
            h = r.forward_with(&h, Some(temb))?;
        }
        Ok(h)
    }
}

impl<R: Module> Module for Block<R> {
    fn forward(&self, _x: &Tensor) -> Result<Tensor> {
        Err(Error::invalid(
            self.title,
            "a UNet block runs inside the UNet (it needs the time embedding)",
        ))
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = Vec::new();
        c.extend(
            self.attentions
                .iter()
                .enumerate()
                .map(|(i, a)| (format!("attentions.{i}"), a.module())),
        );
        c.extend(
            self.resnets
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("resnets.{i}"), r as &dyn Module)),
        );
        if let Some(s) = &self.resample {
            c.push((format!("{}.0", self.resample_name), s));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = self
            .attentions
            .iter_mut()
            .map(Attention::module_mut)
            .collect();
        c.extend(self.resnets.iter_mut().map(|r| r as &mut dyn Module));
        if let Some(s) = &mut self.resample {
            c.push(s);
        }
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        self.title.into()
    }
}

fn down_title(k: AttentionKind) -> &'static str {
    match k {
        AttentionKind::None => "DownBlock2D",
        AttentionKind::Spatial => "AttnDownBlock2D",
        AttentionKind::Cross => "CrossAttnDownBlock2D",
    }
}

fn up_title(k: AttentionKind) -> &'static str {
    match k {
        AttentionKind::None => "UpBlock2D",
        AttentionKind::Spatial => "AttnUpBlock2D",
        AttentionKind::Cross => "CrossAttnUpBlock2D",
    }
}

/// The timestep's MLP (`time_embedding.linear_1`, `linear_2`).
struct TimeEmbedding {
    linear_1: Linear,
    linear_2: Linear,
    training: bool,
}

impl Module for TimeEmbedding {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.linear_2.forward(&self.linear_1.forward(x)?.silu()?)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("linear_1".into(), &self.linear_1),
            ("linear_2".into(), &self.linear_2),
        ]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.linear_1, &mut self.linear_2]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "TimestepEmbedding".into()
    }
}

pub struct UNet {
    pub config: UNetConfig,
    /// The latent side the model was made for (`sample_size`), when the config says.
    pub sample_size: Option<usize>,
    conv_in: Conv2d,
    time_embedding: TimeEmbedding,
    down_blocks: Vec<Block<Downsample>>,
    mid_block: Block<Downsample>,
    up_blocks: Vec<Block<Upsample>>,
    conv_norm_out: GroupNorm,
    conv_out: Conv2d,
    training: bool,
}

impl UNet {
    /// A UNet of this shape with PyTorch's default init drawn from `gen`.
    pub fn new(config: UNetConfig, gen: &mut Generator) -> Result<UNet> {
        // Far beyond any published UNet (SDXL's is 2.6e9): a typo, not a model.
        if config.parameters_at_least() > 5e10 {
            return Err(Error::invalid(
                "UNet",
                format!(
                    "the config describes at least {:.3e} parameters",
                    config.parameters_at_least()
                ),
            ));
        }
        let c = &config;
        let ch = &c.block_out_channels;
        let n = ch.len();
        let temb = 4 * ch[0];
        let (g, eps) = (c.norm_num_groups, c.norm_eps);
        let mut down_blocks = Vec::new();
        let mut c_in = ch[0];
        for (i, &c_out) in ch.iter().enumerate() {
            let mut resnets = Vec::new();
            let mut attentions = Vec::new();
            for j in 0..c.layers_per_block {
                let from = if j == 0 { c_in } else { c_out };
                resnets.push(ResnetBlock::new(from, c_out, Some(temb), g, eps, gen)?);
                attentions.extend(Attention::new(c.down[i], c, c_out, i, gen)?);
            }
            let last = i + 1 == n;
            down_blocks.push(Block {
                resnets,
                attentions,
                resample: (!last)
                    .then(|| Downsample::new(c_out, c.downsample_padding, gen))
                    .transpose()?,
                resample_name: "downsamplers",
                title: down_title(c.down[i]),
                training: true,
            });
            c_in = c_out;
        }
        let top = ch[n - 1];
        let mid_block = Block {
            resnets: vec![
                ResnetBlock::new(top, top, Some(temb), g, eps, gen)?,
                ResnetBlock::new(top, top, Some(temb), g, eps, gen)?,
            ],
            attentions: Attention::new(c.mid, c, top, n - 1, gen)?
                .into_iter()
                .collect(),
            resample: None,
            resample_name: "downsamplers",
            title: match c.mid {
                AttentionKind::Cross => "UNetMidBlock2DCrossAttn",
                _ => "UNetMidBlock2D",
            },
            training: true,
        };
        let rev: Vec<usize> = ch.iter().rev().copied().collect();
        let mut up_blocks = Vec::new();
        let mut prev = rev[0];
        for (i, &c_out) in rev.iter().enumerate() {
            let skip_in = rev[(i + 1).min(n - 1)];
            let block = n - 1 - i;
            let mut resnets = Vec::new();
            let mut attentions = Vec::new();
            for j in 0..=c.layers_per_block {
                let skip = if j == c.layers_per_block {
                    skip_in
                } else {
                    c_out
                };
                let from = if j == 0 { prev } else { c_out };
                resnets.push(ResnetBlock::new(
                    from + skip,
                    c_out,
                    Some(temb),
                    g,
                    eps,
                    gen,
                )?);
                attentions.extend(Attention::new(c.up[i], c, c_out, block, gen)?);
            }
            let last = i + 1 == n;
            up_blocks.push(Block {
                resnets,
                attentions,
                resample: (!last).then(|| Upsample::new(c_out, gen)).transpose()?,
                resample_name: "upsamplers",
                title: up_title(c.up[i]),
                training: true,
            });
            prev = c_out;
        }
        Ok(UNet {
            conv_in: conv(c.in_channels, ch[0], 3, 1, 1, gen)?,
            time_embedding: TimeEmbedding {
                linear_1: Linear::new(ch[0], temb, true, gen)?,
                linear_2: Linear::new(temb, temb, true, gen)?,
                training: true,
            },
            down_blocks,
            mid_block,
            up_blocks,
            conv_norm_out: GroupNorm::new(g, ch[0], eps, true)?,
            conv_out: conv(ch[0], c.out_channels, 3, 1, 1, gen)?,
            config,
            sample_size: None,
            training: true,
        })
    }

    /// A UNet from a diffusers folder (`config.json` and `diffusion_pytorch_model.*`; `unet/`
    /// inside a pipeline's folder is looked for too), every tensor required by name and shape.
    pub fn from_folder(dir: &Path) -> Result<UNet> {
        let dir = if dir.join("unet").join("config.json").is_file() {
            dir.join("unet")
        } else {
            dir.to_path_buf()
        };
        let json = read_config(&dir)?;
        let config = UNetConfig::from_json(&json)?;
        let weights = load_weights_named(&dir, "diffusion_pytorch_model")?;
        super::check_config_against_weights("UNet", config.parameters_at_least(), &weights)?;
        let mut unet = UNet::new(config, &mut Generator::new(0))?;
        unet.sample_size = json
            .get("sample_size")
            .and_then(Value::as_u64)
            .map(|s| s as usize);
        unet.load_state_dict(&weights, true)
            .map_err(|e| Error::format("UNet", format!("{}: {e}", dir.display())))?;
        Ok(unet)
    }

    /// Writes a folder diffusers' `from_pretrained` (and `from_folder`) reads: config.json and
    /// diffusion_pytorch_model.safetensors with diffusers' names.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let path = dir.join("config.json");
        let text = serde_json::to_string_pretty(&self.config.to_json(self.sample_size))
            .expect("JSON values serialize");
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))?;
        let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
        crate::io::safetensors::save(
            dir.join("diffusion_pytorch_model.safetensors"),
            &self.state_dict(),
            Some(meta),
        )
    }

    /// The sinusoidal embedding of timesteps [B] (diffusers' `get_timestep_embedding`, max
    /// period 10000), [B, block_out_channels[0]], in F32.
    fn timestep_features(&self, t: &Tensor) -> Result<Tensor> {
        let dim = self.config.block_out_channels[0];
        let half = dim / 2;
        let freqs: Vec<f64> = (0..half)
            .map(|i| (-(10000f64.ln()) * i as f64 / (half as f64 - self.config.freq_shift)).exp())
            .collect();
        let freqs = Tensor::from_f64s(&freqs, &[1, half], DType::F32)?.to_device(t.device())?;
        let args = t
            .to_dtype(DType::F32)?
            .reshape_to(&[t.numel(), 1])?
            .mul(&freqs)?;
        let (sin, cos) = (args.sin()?, args.cos()?);
        let mut emb = match self.config.flip_sin_to_cos {
            true => Tensor::cat(&[cos, sin], 1)?,
            false => Tensor::cat(&[sin, cos], 1)?,
        };
        if dim % 2 == 1 {
            emb = emb.pad(&[0, 1], crate::ops::rearrange::PadMode::Constant(0.0))?;
        }
        Ok(emb)
    }

    /// The prediction for noisy samples [B, C, H, W] at `timesteps` (one per sample, or one
    /// for all: [B] or [1]) under text states [B, S, cross_attention_dim] (conditional UNets).
    pub fn predict(
        &self,
        sample: &Tensor,
        timesteps: &Tensor,
        context: Option<&Tensor>,
    ) -> Result<Tensor> {
        let c = &self.config;
        let m = c.downscale();
        let &[b, ch, h, w] = sample.shape() else {
            return Err(self.bad_sample(sample));
        };
        if ch != c.in_channels || !h.is_multiple_of(m) || !w.is_multiple_of(m) {
            return Err(self.bad_sample(sample));
        }
        // Timesteps come as host numbers as often as tensors; they go where the sample is.
        let timesteps = timesteps.to_device(sample.device())?;
        let t = match timesteps.numel() {
            1 => timesteps.reshape_to(&[1])?.expand(&[b])?,
            n if n == b => timesteps.reshape_to(&[b])?,
            n => {
                return Err(Error::invalid(
                    "UNet",
                    format!("{n} timesteps for a batch of {b}: give one, or one per sample"),
                ))
            }
        };
        if let Some(ctx) = context {
            if ctx.rank() != 3 || ctx.shape()[0] != b || ctx.shape()[2] != c.cross_attention_dim {
                return Err(Error::layer_input(
                    "UNet2DConditionModel",
                    format!("text states [{b}, S, {}]", c.cross_attention_dim),
                    format!("{:?}", ctx.shape()),
                ));
            }
        } else if c.conditional {
            return Err(Error::invalid(
                "UNet2DConditionModel",
                "the text states (encoder_hidden_states) are required",
            ));
        }
        let context = context.filter(|_| c.conditional);
        let features = self.timestep_features(&t)?.to_dtype(sample.dtype())?;
        let temb = self.time_embedding.forward(&features)?;
        let x = match c.center_input_sample {
            true => sample.mul_scalar(2.0)?.add_scalar(-1.0)?,
            false => sample.clone(),
        };
        let mut h = self.conv_in.forward(&x)?;
        let mut kept = vec![h.clone()];
        for block in &self.down_blocks {
            h = block.down(&h, &temb, context, &mut kept)?;
        }
        h = self.mid_block.middle(&h, &temb, context)?;
        for block in &self.up_blocks {
            h = block.up(&h, &temb, context, &mut kept)?;
        }
        self.conv_out
            .forward(&self.conv_norm_out.forward(&h)?.silu()?)
    }

    fn bad_sample(&self, x: &Tensor) -> Error {
        Error::layer_input(
            "UNet",
            format!(
                "samples [N, {}, H, W] with H and W multiples of {}",
                self.config.in_channels,
                self.config.downscale()
            ),
            format!("{:?}", x.shape()),
        )
    }
}

impl Module for UNet {
    /// An unconditional UNet at timestep 0; `predict` takes the timestep and the text.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let t = Tensor::zeros(&[1], DType::F32, x.device())?;
        self.predict(x, &t, None)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("conv_in".into(), &self.conv_in),
            ("time_embedding".into(), &self.time_embedding),
        ];
        c.extend(
            self.down_blocks
                .iter()
                .enumerate()
                .map(|(i, b)| (format!("down_blocks.{i}"), b as &dyn Module)),
        );
        c.push(("mid_block".into(), &self.mid_block));
        c.extend(
            self.up_blocks
                .iter()
                .enumerate()
                .map(|(i, b)| (format!("up_blocks.{i}"), b as &dyn Module)),
        );
        c.push(("conv_norm_out".into(), &self.conv_norm_out));
        c.push(("conv_out".into(), &self.conv_out));
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.conv_in, &mut self.time_embedding];
        c.extend(self.down_blocks.iter_mut().map(|b| b as &mut dyn Module));
        c.push(&mut self.mid_block);
        c.extend(self.up_blocks.iter_mut().map(|b| b as &mut dyn Module));
        c.push(&mut self.conv_norm_out);
        c.push(&mut self.conv_out);
        c
    }

    crate::nn::training_field!();

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn title(&self) -> String {
        match self.config.conditional {
            true => "UNet2DConditionModel".into(),
            false => "UNet2DModel".into(),
        }
    }
}
