//! ONNX export of a `TransformerLm`: token ids [batch, sequence] (I64) in, logits [batch,
//! sequence, vocab] (F32) out, for any window up to `max_seq_len`. There is no KV cache in the
//! graph: a runtime that decodes feeds the whole window each step.
//!
//! Everything is opset-13 primitives, computed as the eval-mode forward computes it:
//! - the rotary tables are initializers of `max_seq_len` rows, sliced to the window's length;
//! - the causal mask comes from a Range over the window (0 where a key is visible, -inf after),
//!   so it costs no initializer of max_seq_len² values;
//! - grouped key/value heads are repeated with Expand, as Hugging Face's `repeat_kv` does;
//! - a tied head multiplies by the transposed embedding, so the weight is stored once;
//! - the families' switches as their forward computes them: biases, Qwen3's per-head norms
//!   (before the rotation), sliding windows (a second mask, for the layers that slide),
//!   Gemma's scaled embedding, 1 + weight norms and tanh-GELU gate, Gemma 2's post-norms, score
//!   scale and soft caps of scores and logits; mixtures of experts as every expert on every
//!   token weighted by the router's top-k (ONNX has no grouped product), OLMoE's norms of the
//!   whole q and k projections. LongRoPE (whose factors switch with the length) is refused by
//!   name.

use super::attention::Attention;
use super::block::Block;
use super::TransformerLm;
use crate::io::onnx::export::{write_model, Attr, Dim, ExportOptions, GraphBuilder};
use crate::nn::Module;
use crate::{DType, Result, Tensor};
use std::path::Path;

/// Values every layer reads: the window's rotary tables and the causal masks (full, and
/// for the layers that slide).
struct Window {
    cos: String,
    sin: String,
    mask: Option<String>,
    windowed: Option<String>,
}

impl TransformerLm {
    /// Writes the model as ONNX: input `input_ids`, output `logits`. The sequence dimension is
    /// always named (`sequence`); the batch is named under `opts.dynamic_batch`, else 1.
    pub fn export_onnx(&self, path: impl AsRef<Path>, opts: &ExportOptions) -> Result<()> {
        let c = &self.config;
        unwritten(c)?;
        let mut g = GraphBuilder::new(opts.checked_opset()?);
        let batch = match opts.dynamic_batch {
            true => Dim::Named("batch".into()),
            false => Dim::Fixed(1),
        };
        let seq = Dim::Named("sequence".into());
        let ids = g.input("input_ids", &[batch.clone(), seq.clone()], DType::I64);
        let window = self.window(&mut g, &ids)?;
        let mut x = self
            .embed_tokens
            .to_onnx(&mut g, "model.embed_tokens.", &ids)?;
        if let Some(scale) = c.embedding_scale() {
            let s = g.scalar("embedding_scale", scale as f32)?;
            x = g.node("Mul", &[&x, &s], &[]);
        }
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.to_onnx(&mut g, &format!("model.layers.{i}."), &x, &window, c)?;
        }
        let x = self.norm.to_onnx(&mut g, "model.norm.", &x)?;
        let mut logits = match &self.lm_head {
            Some(head) => head.to_onnx(&mut g, "lm_head.", &x)?,
            None => {
                // The Gather above registered the embedding under this name.
                let w = "model.embed_tokens.weight";
                let wt = g.node("Transpose", &[w], &[("perm", Attr::Ints(vec![1, 0]))]);
                g.node("MatMul", &[&x, &wt], &[])
            }
        };
        if let Some(cap) = c.final_logit_softcapping {
            logits = soft_cap(&mut g, &logits, cap)?;
        }
        g.output(&logits, "logits", &[batch, seq, Dim::Fixed(c.vocab_size)]);
        write_model(g, path)
    }

    /// The rotary tables and the mask for the window of `ids` [batch, sequence].
    fn window(&self, g: &mut GraphBuilder, ids: &str) -> Result<Window> {
        let c = &self.config;
        let rows = c.max_seq_len;
        let (cos, sin) = self.rotary().host_tables(rows);
        let hd = c.head_dim();
        let cos = g.initializer("rope.cos", &Tensor::from_vec(cos, &[rows, hd])?)?;
        let sin = g.initializer("rope.sin", &Tensor::from_vec(sin, &[rows, hd])?)?;
        // The window's length as a 1-D [T] and a scalar T.
        let shape = g.node("Shape", &[ids], &[]);
        let one = g.ints("one", &[1])?;
        let len = g.node("Gather", &[&shape, &one], &[]);
        let (zero, axis0) = (g.ints("zero", &[0])?, g.ints("axis0", &[0])?);
        let mut rows_of = |table: &str| g.node("Slice", &[table, &zero, &len, &axis0], &[]);
        let (cos, sin) = (rows_of(&cos), rows_of(&sin));
        let mask = match c.bidirectional {
            true => None,
            false => Some(causal_mask(g, &len, None)?),
        };
        let slide = self.layers.iter().find_map(|l| l.self_attn.window());
        let windowed = match (c.bidirectional, slide) {
            (false, Some(w)) => Some(causal_mask(g, &len, Some(w))?),
            _ => None,
        };
        Ok(Window {
            cos,
            sin,
            mask,
            windowed,
        })
    }
}

/// What the export does not write yet, by name.
fn unwritten(c: &super::LmConfig) -> Result<()> {
    let mut missing = Vec::new();
    if matches!(
        c.rope_scaling,
        Some(super::rope_scaling::RopeScaling::Longrope { .. })
    ) {
        missing.push("LongRoPE (its factors switch with the length)");
    }
    if matches!(
        c.rope_scaling,
        Some(super::rope_scaling::RopeScaling::Dynamic { .. })
    ) {
        missing.push("dynamic NTK RoPE (its base grows with the length)");
    }
    match missing.is_empty() {
        true => Ok(()),
        false => Err(crate::Error::invalid(
            "ONNX export",
            format!(
                "this {} model has {}, which ONNX export does not write yet",
                c.family.model_type(),
                missing.join(", ")
            ),
        )),
    }
}

/// cap · tanh(x / cap).
fn soft_cap(g: &mut GraphBuilder, x: &str, cap: f64) -> Result<String> {
    let inv = g.scalar("inv_cap", (1.0 / cap) as f32)?;
    let cap = g.scalar("cap", cap as f32)?;
    let scaled = g.node("Mul", &[x, &inv], &[]);
    let t = g.node("Tanh", &[&scaled], &[]);
    Ok(g.node("Mul", &[&t, &cap], &[]))
}

/// [T, T] additive mask: 0 where key j ≤ query i (and, with a window w, i - j < w), -inf
/// elsewhere.
fn causal_mask(g: &mut GraphBuilder, len: &str, window: Option<usize>) -> Result<String> {
    let axis0 = g.ints("axis0", &[0])?;
    let t = g.node("Squeeze", &[len, &axis0], &[]);
    let start_name = g.fresh("start");
    let start = g.initializer(&start_name, &Tensor::from_vec(vec![0i64], &[])?)?;
    let step_name = g.fresh("step");
    let step = g.initializer(&step_name, &Tensor::from_vec(vec![1i64], &[])?)?;
    let positions = g.node("Range", &[&start, &t, &step], &[]);
    let axis1 = g.ints("axis1", &[1])?;
    let queries = g.node("Unsqueeze", &[&positions, &axis1], &[]);
    let keys = g.node("Unsqueeze", &[&positions, &axis0], &[]);
    let mut hidden = g.node("Greater", &[&keys, &queries], &[]);
    if let Some(w) = window {
        // Keys w or more positions back: queries - keys > w - 1.
        let back = g.node("Sub", &[&queries, &keys], &[]);
        let limit_name = g.fresh("window");
        let limit = g.initializer(&limit_name, &Tensor::from_vec(vec![w as i64 - 1], &[])?)?;
        let far = g.node("Greater", &[&back, &limit], &[]);
        hidden = g.node("Or", &[&hidden, &far], &[]);
    }
    let (neg_inf, zero) = (
        g.scalar("neg_inf", f32::NEG_INFINITY)?,
        g.scalar("zero", 0.0)?,
    );
    Ok(g.node("Where", &[&hidden, &neg_inf, &zero], &[]))
}

impl Block {
    fn to_onnx(
        &self,
        g: &mut GraphBuilder,
        prefix: &str,
        x: &str,
        w: &Window,
        c: &super::LmConfig,
    ) -> Result<String> {
        let normed = self
            .input_layernorm
            .to_onnx(g, &format!("{prefix}input_layernorm."), x)?;
        let mut attn = self
            .self_attn
            .to_onnx(g, &format!("{prefix}self_attn."), &normed, w, c)?;
        let post_attention = format!("{prefix}post_attention_layernorm.");
        // Gemma 2 norms the attention's output before it is added, and the MLP's input with
        // its own pre-norm; the others norm the MLP's input with the post-attention norm.
        let h = match &self.feedforward_norms {
            Some(_) => {
                attn = self
                    .post_attention_layernorm
                    .to_onnx(g, &post_attention, &attn)?;
                g.node("Add", &[x, &attn], &[])
            }
            None => g.node("Add", &[x, &attn], &[]),
        };
        let normed = match &self.feedforward_norms {
            Some(n) => n
                .pre
                .to_onnx(g, &format!("{prefix}pre_feedforward_layernorm."), &h)?,
            None => self
                .post_attention_layernorm
                .to_onnx(g, &post_attention, &h)?,
        };
        let mut mlp = self.mlp.to_onnx(g, &format!("{prefix}mlp."), &normed)?;
        if let Some(n) = &self.feedforward_norms {
            mlp = n
                .post
                .to_onnx(g, &format!("{prefix}post_feedforward_layernorm."), &mlp)?;
        }
        Ok(g.node("Add", &[&h, &mlp], &[]))
    }
}

impl Attention {
    fn to_onnx(
        &self,
        g: &mut GraphBuilder,
        prefix: &str,
        x: &str,
        w: &Window,
        c: &super::LmConfig,
    ) -> Result<String> {
        let (h, kv, hd) = (c.n_heads, c.n_kv_heads, c.head_dim());
        let heads = |g: &mut GraphBuilder, name: &str, n: usize| -> Result<String> {
            let (proj, norm) = match name {
                "q_proj" => (&self.q_proj, self.q_norm.as_ref().map(|n| ("q_norm", n))),
                "k_proj" => (&self.k_proj, self.k_norm.as_ref().map(|n| ("k_norm", n))),
                _ => (&self.v_proj, None),
            };
            let mut y = proj.to_onnx(g, &format!("{prefix}{name}."), x)?;
            // OLMoE norms the whole projection [B, T, heads · hd]; Qwen3 each head
            // [B, T, heads, hd]; both before the rotation.
            let whole = c.qk_norm_whole();
            if let (true, Some((norm_name, norm))) = (whole, norm) {
                y = norm.to_onnx(g, &format!("{prefix}{norm_name}."), &y)?;
            }
            let shape = g.ints("shape", &[0, 0, n as i64, hd as i64])?;
            let mut split = g.node("Reshape", &[&y, &shape], &[]);
            if let (false, Some((norm_name, norm))) = (whole, norm) {
                split = norm.to_onnx(g, &format!("{prefix}{norm_name}."), &split)?;
            }
            Ok(g.node(
                "Transpose",
                &[&split],
                &[("perm", Attr::Ints(vec![0, 2, 1, 3]))],
            ))
        };
        let q = heads(g, "q_proj", h)?;
        let k = heads(g, "k_proj", kv)?;
        let v = heads(g, "v_proj", kv)?;
        let q = rotate(g, &q, w, hd)?;
        let k = rotate(g, &k, w, hd)?;
        let k = repeat_kv(g, &k, h, kv, hd)?;
        let v = repeat_kv(g, &v, h, kv, hd)?;
        let kt = g.node(
            "Transpose",
            &[&k],
            &[("perm", Attr::Ints(vec![0, 1, 3, 2]))],
        );
        let scores = g.node("MatMul", &[&q, &kt], &[]);
        let (scale, cap) = self.score_transform(hd);
        let scale = g.scalar("scale", scale as f32)?;
        let mut scores = g.node("Mul", &[&scores, &scale], &[]);
        if let Some(cap) = cap {
            scores = soft_cap(g, &scores, cap)?;
        }
        let mask = match self.window() {
            Some(_) => &w.windowed,
            None => &w.mask,
        };
        if let Some(mask) = mask {
            scores = g.node("Add", &[&scores, mask], &[]);
        }
        let probs = g.node("Softmax", &[&scores], &[("axis", Attr::Int(-1))]);
        let out = g.node("MatMul", &[&probs, &v], &[]);
        let out = g.node(
            "Transpose",
            &[&out],
            &[("perm", Attr::Ints(vec![0, 2, 1, 3]))],
        );
        let shape = g.ints("shape", &[0, 0, (h * hd) as i64])?;
        let merged = g.node("Reshape", &[&out, &shape], &[]);
        self.o_proj.to_onnx(g, &format!("{prefix}o_proj."), &merged)
    }
}

/// x·cos + rotate_half(x)·sin over heads [B, H, T, hd], rotate_half(x) = (-x₂, x₁).
fn rotate(g: &mut GraphBuilder, x: &str, w: &Window, hd: usize) -> Result<String> {
    let first = g.slice(x, -1, 0, hd / 2)?;
    let second = g.slice(x, -1, hd / 2, hd)?;
    let negated = g.node("Neg", &[&second], &[]);
    let rotated = g.concat(&[negated, first], -1);
    let a = g.node("Mul", &[x, &w.cos], &[]);
    let b = g.node("Mul", &[&rotated, &w.sin], &[]);
    Ok(g.node("Add", &[&a, &b], &[]))
}

/// [B, kv, T, hd] -> [B, h, T, hd], each key/value head repeated for its group of queries.
fn repeat_kv(g: &mut GraphBuilder, x: &str, h: usize, kv: usize, hd: usize) -> Result<String> {
    if h == kv {
        return Ok(x.into());
    }
    let axis = g.ints("axis", &[2])?;
    let grouped = g.node("Unsqueeze", &[x, &axis], &[]);
    let reps = g.ints("reps", &[1, 1, (h / kv) as i64, 1, 1])?;
    let expanded = g.node("Expand", &[&grouped, &reps], &[]);
    let shape = g.ints("shape", &[0, h as i64, -1, hd as i64])?;
    Ok(g.node("Reshape", &[&expanded, &shape], &[]))
}
