//! The language model as a Rhai value: a shared handle, so the optimizer, the script's
//! variables and a checkpoint all see the same parameters.

use crate::error::{guard, runtime_error, RhaiResult};
use rhai::{Array, Dynamic, Map, INT};
use rusting_brain::models::transformer_lm::{Family, LmConfig, Precision, TransformerLm};
use rusting_brain::nn::Module;
use rusting_brain::{DType, Generator, Tensor};
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Clone)]
pub struct Lm(Arc<Mutex<TransformerLm>>);

impl Lm {
    pub fn new(model: TransformerLm) -> Self {
        Lm(Arc::new(Mutex::new(model)))
    }

    pub fn lock(&self) -> MutexGuard<'_, TransformerLm> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether both handles hold one model (locking it twice would wait forever).
    pub fn same(&self, other: &Lm) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

crate::options! {
    /// `lm::transformer`'s config; the keys without a default keep LmConfig::new's.
    struct TransformerOptions {
        vocab: usize = 0,
        d_model: usize = 256,
        layers: usize = 4,
        heads: usize = 4,
        kv_heads: usize = heads,
        ffn: usize,
        rope_theta: f64,
        max_seq_len: usize,
        norm_eps: f64,
        tied: bool = true,
        bidirectional: bool = false,
        init_std: f64,
        seed: INT = 0,
        /// A mixture of experts (Mixtral's layout) with this many experts per layer.
        experts: usize,
        experts_per_token: usize,
        router_aux_loss_coef: f64,
        router_z_loss_coef: f64,
    }
}

/// `lm::transformer(#{ ... })`: a fresh model on the script's device.
pub fn transformer(opts: Map) -> RhaiResult<Lm> {
    let o = TransformerOptions::parse("lm::transformer", opts)?;
    if o.vocab == 0 {
        return Err(runtime_error(
            "lm::transformer: vocab is required (the tokenizer's vocab_size)",
        ));
    }
    let mut c = LmConfig::new(o.vocab, o.d_model, o.layers, o.heads);
    c.n_kv_heads = o.kv_heads;
    c.ffn_hidden = o.ffn.unwrap_or(c.ffn_hidden);
    c.rope_theta = o.rope_theta.unwrap_or(c.rope_theta);
    c.max_seq_len = o.max_seq_len.unwrap_or(c.max_seq_len);
    c.norm_eps = o.norm_eps.unwrap_or(c.norm_eps);
    c.tied_embeddings = o.tied;
    c.bidirectional = o.bidirectional;
    c.init_std = o.init_std.unwrap_or(c.init_std);
    if let Some(experts) = o.experts {
        let per_token = o.experts_per_token.unwrap_or(2);
        if experts == 0 || per_token == 0 || per_token > experts {
            return Err(runtime_error(format!(
                "lm::transformer: experts_per_token ({per_token}) must be between 1 and experts ({experts})"
            )));
        }
        // Mixtral's layout; training adds the router losses, as output_router_logits does.
        c.family = Family::Mixtral;
        c.n_experts = Some(experts);
        c.experts_per_token = Some(per_token);
        c.output_router_logits = true;
        c.router_aux_loss_coef = Some(o.router_aux_loss_coef.unwrap_or(0.001));
        c.router_z_loss_coef = o.router_z_loss_coef.filter(|&w| w != 0.0);
    } else if let Some((k, _)) = [
        ("experts_per_token", o.experts_per_token.is_some()),
        ("router_aux_loss_coef", o.router_aux_loss_coef.is_some()),
        ("router_z_loss_coef", o.router_z_loss_coef.is_some()),
    ]
    .into_iter()
    .find(|(_, given)| *given)
    {
        return Err(runtime_error(format!(
            "lm::transformer: {k} is a mixture-of-experts option; give experts too"
        )));
    }
    let mut gen = Generator::new(o.seed as u64);
    let device = crate::tensor::default_device();
    guard(|| TransformerLm::new_on(c, &mut gen, DType::F32, device)).map(Lm::new)
}

/// The config with the names `lm::transformer` takes.
pub fn config_map(c: &LmConfig) -> Map {
    let mut m = Map::new();
    let mut int = |k: &str, v: usize| m.insert(k.into(), Dynamic::from_int(v as INT));
    int("vocab", c.vocab_size);
    int("d_model", c.d_model);
    int("layers", c.n_layers);
    int("heads", c.n_heads);
    int("kv_heads", c.n_kv_heads);
    int("ffn", c.ffn_hidden);
    int("max_seq_len", c.max_seq_len);
    if let Some(experts) = c.n_experts {
        int("experts", experts);
        int("experts_per_token", c.experts_per_token.unwrap_or(1));
    }
    m.insert("rope_theta".into(), Dynamic::from_float(c.rope_theta));
    m.insert("norm_eps".into(), Dynamic::from_float(c.norm_eps));
    m.insert("init_std".into(), Dynamic::from_float(c.init_std));
    m.insert("tied".into(), Dynamic::from_bool(c.tied_embeddings));
    m.insert("bidirectional".into(), Dynamic::from_bool(c.bidirectional));
    m
}

pub fn parse_precision(name: &str) -> RhaiResult<Precision> {
    Ok(match name {
        "auto" => Precision::Auto,
        "f32" | "full" => Precision::Full,
        "bf16" => Precision::Mixed(DType::BF16),
        "f16" => Precision::Mixed(DType::F16),
        other => {
            return Err(runtime_error(format!(
                "precision must be \"auto\", \"f32\", \"bf16\" or \"f16\", got \"{other}\""
            )))
        }
    })
}

fn tensor_of(v: &Dynamic, what: &str) -> RhaiResult<Tensor> {
    v.clone()
        .try_cast::<Tensor>()
        .ok_or_else(|| runtime_error(format!("{what}: expected a Tensor, got {}", v.type_name())))
}

fn pair_of(v: &Dynamic, what: &str) -> RhaiResult<(Tensor, Tensor)> {
    let arr = v
        .read_lock::<Array>()
        .ok_or_else(|| runtime_error(format!("{what}: expected [x, y], got {}", v.type_name())))?;
    match arr.as_slice() {
        [x, y] => Ok((tensor_of(x, what)?, tensor_of(y, what)?)),
        other => Err(runtime_error(format!(
            "{what}: expected [x, y], got an array of {}",
            other.len()
        ))),
    }
}

/// `[x, y]`, or an array of `[x, y]` micro-batches for gradient accumulation.
pub fn batches_of(v: &Dynamic, what: &str) -> RhaiResult<Vec<(Tensor, Tensor)>> {
    let arr = v.read_lock::<Array>().ok_or_else(|| {
        runtime_error(format!(
            "{what}: expected [x, y] or an array of [x, y], got {}",
            v.type_name()
        ))
    })?;
    let nested = arr.first().is_some_and(|f| f.is_array());
    if !nested {
        drop(arr);
        return Ok(vec![pair_of(v, what)?]);
    }
    arr.iter()
        .enumerate()
        .map(|(i, b)| pair_of(b, &format!("{what} batch {i}")))
        .collect()
}

pub fn ids_of(arr: &Array, what: &str) -> RhaiResult<Vec<u32>> {
    arr.iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_int()
                .ok()
                .and_then(|t| u32::try_from(t).ok())
                .ok_or_else(|| {
                    runtime_error(format!("{what}: element {i} is not a token id ({v})"))
                })
        })
        .collect()
}

pub fn ids_to_array(ids: &[u32]) -> Array {
    ids.iter().map(|&t| Dynamic::from_int(t as INT)).collect()
}

/// The parameters an optimizer should train: all of them, or only the LoRA adapters.
pub fn parameters(m: &Lm) -> Array {
    m.lock()
        .trainable_parameters()
        .into_iter()
        .map(Dynamic::from)
        .collect()
}
