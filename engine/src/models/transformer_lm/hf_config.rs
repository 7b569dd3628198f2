//! `config.json` as Hugging Face writes it for each family, read and written: the fields
//! whose meaning differs by family are brought to this config's on the way in.

use super::config::{LmConfig, MAX_LAYERS};
use super::family::Family;
use super::rope_scaling::RopeScaling;
use crate::{Error, Result};

impl LmConfig {
    /// The config as Hugging Face writes `config.json` for its family's causal LM
    /// (`LlamaForCausalLM`, `Qwen2ForCausalLM`, ...).
    pub fn to_hf_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert(
                "architectures".into(),
                serde_json::json!([self.family.architecture()]),
            );
            m.insert("hidden_act".into(), self.family.hidden_act().into());
            m.insert("mlp_bias".into(), false.into());
            if matches!(
                self.family,
                Family::Qwen2 | Family::Qwen3 | Family::Qwen2Moe | Family::Qwen3Moe
            ) {
                m.insert("use_sliding_window".into(), false.into());
            }
            // transformers' Mixtral reads its expert count under its own name.
            if self.family == Family::Mixtral {
                if let Some(e) = m.remove("num_experts") {
                    m.insert("num_local_experts".into(), e);
                }
            }
            // transformers' Mistral reads a missing window as 4096: write "none" out.
            if self.family.has_window() && self.sliding_window.is_none() {
                m.insert("sliding_window".into(), serde_json::Value::Null);
            }
            // transformers' Phi-3 takes LongRoPE's pretrained context from the top level
            // first (4096 when absent).
            if let Some(RopeScaling::Longrope {
                original_max_position_embeddings: old,
                ..
            }) = &self.rope_scaling
            {
                m.insert("original_max_position_embeddings".into(), (*old).into());
            }
            // Dynamic NTK's context is transformers' max_position_embeddings (the model reaches
            // factor times further here).
            if let Some(RopeScaling::Dynamic {
                original_max_position_embeddings: old,
                ..
            }) = &self.rope_scaling
            {
                m.insert("max_position_embeddings".into(), (*old).into());
            }
            // Gemma 2's reader defaults what is absent to its released values: a cap of 50
            // and 30, a scale of 256^-1/2; write what this model has instead.
            if self.family == Family::Gemma2 {
                for cap in ["attn_logit_softcapping", "final_logit_softcapping"] {
                    m.entry(cap).or_insert(serde_json::Value::Null);
                }
                m.entry("query_pre_attn_scalar")
                    .or_insert(self.head_dim().into());
            }
        }
        v
    }

    /// Reads a config written by `to_hf_json` or by `transformers` (unknown fields are ignored,
    /// but a feature this model lacks is refused rather than silently dropped).
    pub fn from_json(text: &str) -> Result<Self> {
        let mut value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| Error::format("model config", e.to_string()))?;
        let family = match value.get("model_type").and_then(|v| v.as_str()) {
            Some(name) => Family::from_model_type(name)?,
            None => Family::Llama,
        };
        normalise_family_fields(&mut value, family)?;
        for (field, ok) in [
            ("mlp_bias", serde_json::Value::Bool(false)),
            (
                "hidden_act",
                serde_json::Value::String(family.hidden_act().into()),
            ),
        ] {
            if let Some(v) = value.get(field) {
                if *v != ok {
                    return Err(Error::format(
                        "model config",
                        format!("{field} = {v} is not supported (only {ok})"),
                    ));
                }
            }
        }
        let mut config: LmConfig = serde_json::from_value(value.clone())
            .map_err(|e| Error::format("model config", e.to_string()))?;
        // transformers leaves num_key_value_heads out when it equals the head count.
        if value.get("num_key_value_heads").is_none_or(|v| v.is_null()) {
            config.n_kv_heads = config.n_heads;
        }
        config.validate()?;
        Ok(config)
    }
}

/// The fields whose meaning differs by family, brought to this config's: Qwen's
/// `sliding_window` only counts under `use_sliding_window` (which, with its per-layer
/// `max_window_layers`, is refused), transformers 5's `rope_parameters` holds the rotary base
/// and any scaling, and `layer_types` may only list full attention (or, for Mistral, its one
/// window).
fn normalise_family_fields(value: &mut serde_json::Value, family: Family) -> Result<()> {
    let refuse = |what: String| Err(Error::format("model config", what));
    let Some(m) = value.as_object_mut() else {
        return refuse("config.json is not an object".into());
    };
    if matches!(
        family,
        Family::Qwen2 | Family::Qwen3 | Family::Qwen2Moe | Family::Qwen3Moe
    ) {
        if m.get("use_sliding_window").and_then(|v| v.as_bool()) == Some(true) {
            return refuse(format!(
                "use_sliding_window = true ({} layers above max_window_layers attending a window) is not supported",
                family.model_type()
            ));
        }
        m.remove("sliding_window");
    }
    if matches!(family, Family::Llama | Family::Olmoe) {
        m.remove("sliding_window");
    }
    if family == Family::Olmoe && m.get("clip_qkv").is_some_and(|v| !v.is_null()) {
        return refuse("clip_qkv (clamping q, k and v) is not supported".into());
    }
    if m.get("router_jitter_noise")
        .and_then(|v| v.as_f64())
        .is_some_and(|j| j != 0.0)
    {
        return refuse("router_jitter_noise (noise on the router's input) is not supported".into());
    }
    // transformers 4 files without the field mean these defaults.
    if matches!(family, Family::Mixtral)
        && !m.contains_key("num_local_experts")
        && !m.contains_key("num_experts")
    {
        m.insert("num_local_experts".into(), 8.into());
    }
    if family.is_moe() && !m.contains_key("router_aux_loss_coef") {
        let coef = if family == Family::Olmoe { 0.01 } else { 0.001 };
        m.insert("router_aux_loss_coef".into(), coef.into());
    }
    if m.get("mlp_only_layers").is_some_and(|v| v.is_null()) {
        m.remove("mlp_only_layers");
    }
    // Defaults of transformers' config classes where they differ from LLaMA's.
    match family {
        Family::Mistral if !m.contains_key("sliding_window") => {
            m.insert("sliding_window".into(), 4096.into());
        }
        _ => {}
    }
    if family.is_gemma() && !m.contains_key("tie_word_embeddings") {
        m.insert("tie_word_embeddings".into(), true.into());
    }
    if family == Family::Gemma2 {
        for (field, default) in [
            ("sliding_window", serde_json::json!(4096)),
            ("query_pre_attn_scalar", serde_json::json!(256)),
            ("attn_logit_softcapping", serde_json::json!(50.0)),
            ("final_logit_softcapping", serde_json::json!(30.0)),
        ] {
            m.entry(field).or_insert(default);
        }
        // transformers 4 alternates by layer index (even layers slide); 5 writes the list.
        if !m.contains_key("layer_types") {
            let layers = m
                .get("num_hidden_layers")
                .and_then(|v| v.as_u64())
                .unwrap_or(0)
                .min(MAX_LAYERS as u64);
            let types: Vec<_> = (0..layers)
                .map(|i| match i % 2 {
                    0 => "sliding_attention",
                    _ => "full_attention",
                })
                .collect();
            m.insert("layer_types".into(), serde_json::json!(types));
        }
    }
    if family.is_gemma() {
        // Gemma's MLP reads hidden_activation (tanh GELU when absent), not hidden_act.
        let act = m
            .get("hidden_activation")
            .and_then(|v| v.as_str())
            .unwrap_or("gelu_pytorch_tanh")
            .to_string();
        if !matches!(act.as_str(), "gelu_pytorch_tanh" | "gelu_new" | "gelu_tanh") {
            return refuse(format!(
                "hidden_activation = \"{act}\" is not supported (only gelu_pytorch_tanh)"
            ));
        }
        m.insert("hidden_act".into(), "gelu_pytorch_tanh".into());
    }
    if let Some(types) = m.get("layer_types").and_then(|v| v.as_array()) {
        let allowed =
            |t: &str| t == "full_attention" || (family.has_window() && t == "sliding_attention");
        if let Some(t) = types
            .iter()
            .filter_map(|t| t.as_str())
            .find(|t| !allowed(t))
        {
            return refuse(format!(
                "layer_types with \"{t}\" layers are not supported in a {} model",
                family.model_type()
            ));
        }
        // All full: the same as none (Qwen and LLaMA files list them).
        if !family.has_window() {
            m.remove("layer_types");
        }
    }
    for cap in [
        "attn_logit_softcapping",
        "final_logit_softcapping",
        "query_pre_attn_scalar",
    ] {
        if m.get(cap).is_some_and(|v| v.is_null()) {
            m.remove(cap);
        }
    }
    // transformers 4 writes `rope_scaling` (its type under "type" in older files), 5 writes
    // `rope_parameters` with the base inside; both become `rope_theta` + `rope_scaling`.
    let mut scaling = m.remove("rope_scaling").filter(|v| !v.is_null());
    if let Some(rope) = m.remove("rope_parameters").filter(|v| v.is_object()) {
        if let Some(theta) = rope
            .get("rope_theta")
            .filter(|_| !m.contains_key("rope_theta"))
        {
            m.insert("rope_theta".into(), theta.clone());
        }
        scaling = scaling.or(Some(rope));
    }
    if let Some(serde_json::Value::Object(mut s)) = scaling {
        if let Some(kind) = s.remove("type").filter(|_| !s.contains_key("rope_type")) {
            s.insert("rope_type".into(), kind);
        }
        s.remove("rope_theta");
        if let Some(f) = s
            .remove("partial_rotary_factor")
            .and_then(|f| f.as_f64())
            .filter(|&f| f != 1.0)
        {
            return refuse(format!(
                "partial_rotary_factor = {f} (rotating part of each head) is not supported"
            ));
        }
        // Phi-3's older files call LongRoPE "su" (or "yarn"); its pretrained context is the
        // top-level original_max_position_embeddings when there is one.
        let phi3_long = matches!(
            s.get("rope_type").and_then(|v| v.as_str()),
            Some("su") | Some("yarn")
        ) && family == Family::Phi3;
        if phi3_long {
            s.insert("rope_type".into(), "longrope".into());
        }
        if s.get("rope_type").and_then(|v| v.as_str()) == Some("longrope") {
            let original = m
                .get("original_max_position_embeddings")
                .or(s.get("original_max_position_embeddings"))
                .or(m.get("max_position_embeddings"))
                .cloned();
            if let Some(o) = original {
                s.insert("original_max_position_embeddings".into(), o);
            }
        }
        // Dynamic NTK grows the base past max_position_embeddings, which is the pretrained
        // context there; the model itself reaches factor times further.
        if s.get("rope_type").and_then(|v| v.as_str()) == Some("dynamic") {
            let context = m.get("max_position_embeddings").and_then(|v| v.as_u64());
            let factor = s.get("factor").and_then(|v| v.as_f64());
            if let Some(context) = context {
                s.insert("original_max_position_embeddings".into(), context.into());
                let reach = (context as f64 * factor.unwrap_or(1.0).max(1.0)).ceil() as u64;
                m.insert("max_position_embeddings".into(), reach.into());
            }
        }
        let kind = s
            .get("rope_type")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        if let Some(kind) = kind.filter(|k| k != "default") {
            let parsed: RopeScaling = serde_json::from_value(serde_json::Value::Object(s))
                .map_err(|e| {
                    Error::format(
                        "model config",
                        format!(
                            "rope_scaling of rope_type \"{kind}\": {e} (linear, dynamic, llama3, yarn and longrope run)"
                        ),
                    )
                })?;
            m.insert(
                "rope_scaling".into(),
                serde_json::to_value(parsed).unwrap_or_default(),
            );
        }
    }
    if m.get("head_dim").is_some_and(|v| v.is_null()) {
        m.remove("head_dim");
    }
    Ok(())
}
