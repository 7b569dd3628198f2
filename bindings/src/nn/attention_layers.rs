//! Layers with more than one input: multi-head attention and the transformer encoder layer.
//! As modules they take one tensor (self-attention); their own methods take the rest
//! (`mha.attention(q, k, v, #{ masks })`, `layer.encode(src, #{ masks })`). And GroupNorm.

use super::Model;
use crate::convert::usize_of;
use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use crate::options::Options;
use rhai::{Map, INT};
use rusting_brain::nn::{
    AttentionMasks, EncoderLayerConfig, GroupNorm, MultiheadAttention, TransformerEncoderLayer,
};
use rusting_brain::{Generator, Tensor};

const MASK_KEYS: [&str; 3] = ["key_padding_mask", "attn_mask", "is_causal"];

/// The masks of `#{ key_padding_mask, attn_mask, is_causal }` (tensors, and a bool).
fn masks(o: &Options) -> RhaiResult<(Option<Tensor>, Option<Tensor>, bool)> {
    let tensor = |key: &str| -> RhaiResult<Option<Tensor>> {
        match o.get(key) {
            None => Ok(None),
            Some(v) if v.is_unit() => Ok(None),
            Some(v) => v.clone().try_cast::<Tensor>().map(Some).ok_or_else(|| {
                runtime_error(format!("{key} must be a tensor, got a {}", v.type_name()))
            }),
        }
    };
    Ok((
        tensor("key_padding_mask")?,
        tensor("attn_mask")?,
        o.bool("is_causal", false)?,
    ))
}

fn multi_head_attention(embed_dim: INT, heads: INT, opts: Map) -> RhaiResult<Model> {
    const WHAT: &str = "nn::multi_head_attention";
    let o = Options::new(WHAT, opts, &["bias", "dropout", "batch_first", "seed"])?;
    let (e, h) = (usize_of(embed_dim, WHAT)?, usize_of(heads, WHAT)?);
    let mut gen = Generator::new(o.int("seed", 0)? as u64);
    let (bias, dropout, batch_first) = (
        o.bool("bias", true)?,
        o.float("dropout", 0.0)?,
        o.bool("batch_first", false)?,
    );
    guard(|| MultiheadAttention::new(e, h, bias, dropout, batch_first, &mut gen))
        .map(|m| Model::new(Box::new(m)))
}

fn encoder_layer(d_model: INT, nhead: INT, opts: Map) -> RhaiResult<Model> {
    const WHAT: &str = "nn::transformer_encoder_layer";
    let o = Options::new(
        WHAT,
        opts,
        &[
            "dim_feedforward",
            "dropout",
            "activation",
            "layer_norm_eps",
            "batch_first",
            "norm_first",
            "bias",
            "seed",
        ],
    )?;
    let mut c = EncoderLayerConfig::new(usize_of(d_model, WHAT)?, usize_of(nhead, WHAT)?);
    c.dim_feedforward = o.usize("dim_feedforward", c.dim_feedforward)?;
    c.dropout = o.float("dropout", c.dropout)?;
    c.layer_norm_eps = o.float("layer_norm_eps", c.layer_norm_eps)?;
    c.batch_first = o.bool("batch_first", c.batch_first)?;
    c.norm_first = o.bool("norm_first", c.norm_first)?;
    c.bias = o.bool("bias", c.bias)?;
    if let Some(name) = o.string("activation")? {
        c.activation = super::modules::activation_named(&name)?;
    }
    let mut gen = Generator::new(o.int("seed", 0)? as u64);
    guard(|| TransformerEncoderLayer::new(c, &mut gen)).map(|m| Model::new(Box::new(m)))
}

fn group_norm_layer(groups: INT, channels: INT, opts: Map) -> RhaiResult<Model> {
    const WHAT: &str = "nn::group_norm";
    let o = Options::new(WHAT, opts, &["eps", "affine"])?;
    let (g, c) = (usize_of(groups, WHAT)?, usize_of(channels, WHAT)?);
    let (eps, affine) = (o.float("eps", 1e-5)?, o.bool("affine", true)?);
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
            let o = Options::new("mha.attention", opts, &MASK_KEYS)?;
            let (pad, mask, is_causal) = masks(&o)?;
            m.with_layer("attention", |a: &MultiheadAttention| {
                let masks = AttentionMasks {
                    key_padding_mask: pad.as_ref(),
                    attn_mask: mask.as_ref(),
                    is_causal,
                };
                guard(|| a.attend(&q, &k, &v, masks))
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
            let o = Options::new("layer.encode", opts, &MASK_KEYS)?;
            let (pad, mask, is_causal) = masks(&o)?;
            m.with_layer("encode", |l: &TransformerEncoderLayer| {
                let masks = AttentionMasks {
                    key_padding_mask: pad.as_ref(),
                    attn_mask: mask.as_ref(),
                    is_causal,
                };
                guard(|| l.encode(&src, masks))
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
