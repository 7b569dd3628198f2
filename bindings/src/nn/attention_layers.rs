//! Layers with more than one input: multi-head attention and the transformer encoder layer.
//! As modules they take one tensor (self-attention); their own methods take the rest
//! (`mha.attention(q, k, v, #{ masks })`, `layer.encode(src, #{ masks })`). And GroupNorm.

use super::Model;
use crate::convert::usize_of;
use crate::error::{guard, RhaiResult};
use crate::help::Api;
use rhai::{Map, INT};
use rusting_brain::nn::{
    AttentionMasks, EncoderLayerConfig, GroupNorm, MultiheadAttention, TransformerEncoderLayer,
};
use rusting_brain::{Generator, Tensor};

crate::options! {
    /// The masks of `#{ key_padding_mask, attn_mask, is_causal }` (tensors, and a bool).
    struct MaskOptions {
        key_padding_mask: Tensor,
        attn_mask: Tensor,
        is_causal: bool = false,
    }
}

impl MaskOptions {
    fn masks(&self) -> AttentionMasks<'_> {
        AttentionMasks {
            key_padding_mask: self.key_padding_mask.as_ref(),
            attn_mask: self.attn_mask.as_ref(),
            is_causal: self.is_causal,
        }
    }
}

crate::options! {
    struct MhaOptions {
        bias: bool = true,
        dropout: f64 = 0.0,
        batch_first: bool = false,
        seed: INT = 0,
    }
}

fn multi_head_attention(embed_dim: INT, heads: INT, opts: Map) -> RhaiResult<Model> {
    const WHAT: &str = "nn::multi_head_attention";
    let o = MhaOptions::parse(WHAT, opts)?;
    let (e, h) = (usize_of(embed_dim, WHAT)?, usize_of(heads, WHAT)?);
    let mut gen = Generator::new(o.seed as u64);
    let (bias, dropout, batch_first) = (o.bias, o.dropout, o.batch_first);
    guard(|| MultiheadAttention::new(e, h, bias, dropout, batch_first, &mut gen))
        .map(|m| Model::new(Box::new(m)))
}

crate::options! {
    /// Each absent key keeps EncoderLayerConfig's default (PyTorch's).
    struct EncoderLayerOptions {
        dim_feedforward: usize,
        dropout: f64,
        activation: String,
        layer_norm_eps: f64,
        batch_first: bool,
        norm_first: bool,
        bias: bool,
        seed: INT = 0,
    }
}

fn encoder_layer(d_model: INT, nhead: INT, opts: Map) -> RhaiResult<Model> {
    const WHAT: &str = "nn::transformer_encoder_layer";
    let o = EncoderLayerOptions::parse(WHAT, opts)?;
    let mut c = EncoderLayerConfig::new(usize_of(d_model, WHAT)?, usize_of(nhead, WHAT)?);
    c.dim_feedforward = o.dim_feedforward.unwrap_or(c.dim_feedforward);
    c.dropout = o.dropout.unwrap_or(c.dropout);
    c.layer_norm_eps = o.layer_norm_eps.unwrap_or(c.layer_norm_eps);
    c.batch_first = o.batch_first.unwrap_or(c.batch_first);
    c.norm_first = o.norm_first.unwrap_or(c.norm_first);
    c.bias = o.bias.unwrap_or(c.bias);
    if let Some(name) = &o.activation {
        c.activation = super::activation_layers::activation_named(name)?;
    }
    let mut gen = Generator::new(o.seed as u64);
    guard(|| TransformerEncoderLayer::new(c, &mut gen)).map(|m| Model::new(Box::new(m)))
}

crate::options! {
    struct GroupNormOptions {
        eps: f64 = 1e-5,
        affine: bool = true,
    }
}

fn group_norm_layer(groups: INT, channels: INT, opts: Map) -> RhaiResult<Model> {
    const WHAT: &str = "nn::group_norm";
    let GroupNormOptions { eps, affine } = GroupNormOptions::parse(WHAT, opts)?;
    let (g, c) = (usize_of(groups, WHAT)?, usize_of(channels, WHAT)?);
    guard(|| GroupNorm::new(g, c, eps, affine)).map(|m| Model::new(Box::new(m)))
}

pub fn register(api: &mut Api) {
    api.func(
        "multi_head_attention",
        "nn::multi_head_attention(embed_dim, num_heads, #{ bias, dropout, batch_first, seed }) -> Model",
        "torch.nn.MultiheadAttention: parameters in_proj_weight, in_proj_bias, out_proj.*; inputs [L, B, E] unless batch_first. As a layer it is self-attention; mha.attention(q, k, v, #{ ... }) takes the rest.",
        "let mha = nn::multi_head_attention(16, 4, #{ batch_first: true }); print(mha.forward(randn([2, 5, 16])).shape);",
        multi_head_attention,
    );
    api.func(
        "multi_head_attention",
        "nn::multi_head_attention(embed_dim, num_heads) -> Model",
        "The same with PyTorch's defaults (bias, no dropout, seq-first).",
        "let mha = nn::multi_head_attention(8, 2); print(mha.forward(randn([5, 2, 8])).shape);",
        |e: INT, h: INT| multi_head_attention(e, h, Map::new()),
    );
    api.method(
        "attention",
        "mha.attention(query, key, value, #{ key_padding_mask, attn_mask, is_causal }) -> Tensor",
        "Attention of the queries over the keys and values: key_padding_mask [B, S] bool marks keys to ignore; attn_mask [T, S] (or [B * heads, T, S]) bool marks pairs that may not attend, or is a float added to the scores; is_causal lets query i see keys 0..=i.",
        "let mha = nn::multi_head_attention(8, 2, #{ batch_first: true }); let q = randn([1, 3, 8]); let kv = randn([1, 4, 8]); let pad = tensor([[false, false, false, true]]); print(mha.attention(q, kv, kv, #{ key_padding_mask: pad }).shape);",
        |m: &mut Model, q: Tensor, k: Tensor, v: Tensor, opts: Map| {
            let o = MaskOptions::parse("mha.attention", opts)?;
            m.with_layer("attention", |a: &MultiheadAttention| {
                guard(|| a.attend(&q, &k, &v, o.masks()))
            })
        },
    );
    api.func(
        "transformer_encoder_layer",
        "nn::transformer_encoder_layer(d_model, nhead, #{ dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first, bias, seed }) -> Model",
        "torch.nn.TransformerEncoderLayer with its defaults (dim_feedforward 2048, dropout 0.1, relu, post-norm, seq-first) and its parameter names (self_attn.*, linear1, linear2, norm1, norm2).",
        "let layer = nn::transformer_encoder_layer(16, 4, #{ dim_feedforward: 32, batch_first: true }); print(layer.forward(randn([2, 5, 16])).shape);",
        encoder_layer,
    );
    api.func(
        "transformer_encoder_layer",
        "nn::transformer_encoder_layer(d_model, nhead) -> Model",
        "The same with PyTorch's defaults.",
        "let layer = nn::transformer_encoder_layer(8, 2); print(layer.forward(randn([5, 2, 8])).shape);",
        |d: INT, h: INT| encoder_layer(d, h, Map::new()),
    );
    api.method(
        "encode",
        "layer.encode(src, #{ key_padding_mask, attn_mask, is_causal }) -> Tensor",
        "The encoder layer with masks for its self-attention (key_padding_mask is PyTorch's src_key_padding_mask, attn_mask its mask).",
        "let layer = nn::transformer_encoder_layer(8, 2, #{ batch_first: true, dim_feedforward: 16 }); layer.eval(); let pad = tensor([[false, false, true]]); print(layer.encode(randn([1, 3, 8]), #{ key_padding_mask: pad }).shape);",
        |m: &mut Model, src: Tensor, opts: Map| {
            let o = MaskOptions::parse("layer.encode", opts)?;
            m.with_layer("encode", |l: &TransformerEncoderLayer| {
                guard(|| l.encode(&src, o.masks()))
            })
        },
    );
    api.func(
        "group_norm",
        "nn::group_norm(groups, channels, #{ eps, affine }) -> Model",
        "torch.nn.GroupNorm as a layer: the channels of [N, C, ...] in groups, each normalized over its channels and positions, with a per-channel weight and bias.",
        "let gn = nn::group_norm(2, 8); print(gn.forward(randn([2, 8, 4, 4])).shape);",
        group_norm_layer,
    );
    api.func(
        "group_norm",
        "nn::group_norm(groups, channels) -> Model",
        "The same with eps 1e-5 and affine.",
        "let gn = nn::group_norm(4, 16);",
        |g: INT, c: INT| group_norm_layer(g, c, Map::new()),
    );
}
