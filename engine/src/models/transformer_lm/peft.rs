//! LoRA adapters in Hugging Face PEFT's directory layout, so `PeftModel.from_pretrained(base,
//! dir)` loads what we save and we load what PEFT saves:
//!
//! - `adapter_config.json`: PEFT's `LoraConfig` (`peft_type` "LORA", `r`, `lora_alpha`,
//!   `lora_dropout`, `target_modules`, ...);
//! - `adapter_model.safetensors`: the factors under the names `PeftModel` gives them once the
//!   adapter name is dropped, as its `save_pretrained` does:
//!   `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight` ([r, in]) and
//!   `...lora_B.weight` ([out, r]).
//!
//! A config feature we do not implement (DoRA, biases, per-layer ranks, `fan_in_fan_out`,
//! extra trained modules) is refused by name rather than loaded wrong.

use super::{LoraConfig, TransformerLm, LORA_TARGETS};
use crate::io::safetensors;
use crate::nn::{Module, NameReport};
use crate::{Error, Result, Tensor};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

pub const ADAPTER_CONFIG: &str = "adapter_config.json";
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";
/// What `PeftModelForCausalLM` puts before the wrapped model's own names.
const PEFT_PREFIX: &str = "base_model.model.";

/// Writes the model's adapters to `dir` (created if needed). `base_model` is recorded as
/// `base_model_name_or_path`, where PEFT looks for the base when none is given.
pub fn save_adapter(
    model: &TransformerLm,
    dir: impl AsRef<Path>,
    base_model: Option<&str>,
) -> Result<()> {
    let dir = dir.as_ref();
    let config = model.lora_config().ok_or_else(|| {
        Error::invalid(
            "save_adapter",
            "the model has no LoRA adapters (add them with lora / add_lora)",
        )
    })?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tensors: Vec<(String, Tensor)> = model
        .named_parameters()
        .into_iter()
        .filter(|(n, _)| super::is_adapter_name(n))
        .map(|(n, t)| (format!("{PEFT_PREFIX}{n}"), t.detach()))
        .collect();
    let config_path = dir.join(ADAPTER_CONFIG);
    let text = serde_json::to_string_pretty(&peft_config_json(config, base_model))
        .map_err(|e| Error::format("adapter_config.json", e.to_string()))?;
    std::fs::write(&config_path, text + "\n").map_err(|e| Error::io(&config_path, e))?;
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::save(dir.join(ADAPTER_WEIGHTS), &tensors, Some(meta))
}

/// PEFT's `LoraConfig` fields for our adapters (its defaults for the features we lack).
fn peft_config_json(c: &LoraConfig, base_model: Option<&str>) -> Value {
    json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "revision": null,
        "inference_mode": true,
        "r": c.rank,
        "lora_alpha": c.alpha,
        "lora_dropout": c.dropout,
        "target_modules": c.targets,
        "bias": "none",
        "fan_in_fan_out": false,
        "use_rslora": c.use_rslora,
        "use_dora": false,
        "init_lora_weights": true,
        "modules_to_save": null,
        "layers_to_transform": null,
        "layers_pattern": null,
        "rank_pattern": {},
        "alpha_pattern": {},
    })
}

/// Adds the adapters saved in `dir` (by `save_adapter` or PEFT) to `model`, which must have
/// none yet. Everything is checked before the model changes: the config, then every tensor's
/// presence and shape, all problems in one error.
pub fn load_adapter(model: &mut TransformerLm, dir: impl AsRef<Path>) -> Result<LoraConfig> {
    let dir = dir.as_ref();
    if model.lora_config().is_some() {
        return Err(Error::invalid(
            "load_adapter",
            "the model already has LoRA adapters (merge_lora() them first)",
        ));
    }
    let config_path = dir.join(ADAPTER_CONFIG);
    let text = std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
    let config = lora_config_from_peft(&text).map_err(|msg| {
        Error::format(
            "adapter_config.json",
            format!("{}: {msg}", config_path.display()),
        )
    })?;
    let weights_path = dir.join(ADAPTER_WEIGHTS);
    if !weights_path.exists() && dir.join("adapter_model.bin").exists() {
        return Err(Error::format(
            "adapter",
            format!(
                "{} holds adapter_model.bin (pickle); only {ADAPTER_WEIGHTS} is read",
                dir.display()
            ),
        ));
    }
    let file = safetensors::load(&weights_path)?;
    let mut expected = BTreeMap::new();
    for (name, module, linear) in model.projections() {
        if config.adapts(module) {
            let (i, o, r) = (linear.in_features(), linear.out_features(), config.rank);
            expected.insert(format!("{PEFT_PREFIX}{name}.lora_A.weight"), vec![r, i]);
            expected.insert(format!("{PEFT_PREFIX}{name}.lora_B.weight"), vec![o, r]);
        }
    }
    let found: Vec<(&str, &[usize])> = file.iter().map(|(n, t)| (n.as_str(), t.shape())).collect();
    NameReport::compare(
        expected.iter().map(|(n, s)| (n.as_str(), s.as_slice())),
        found,
    )
    .into_result(&weights_path.display().to_string())?;
    model.add_lora(config.clone())?;
    let state: BTreeMap<String, Tensor> = file
        .into_iter()
        .filter_map(|(n, t)| Some((n.strip_prefix(PEFT_PREFIX)?.to_string(), t)))
        .collect();
    let own: BTreeMap<String, Tensor> = model
        .named_parameters()
        .into_iter()
        .filter(|(n, _)| super::is_adapter_name(n))
        .collect();
    crate::nn::load_named(own, &state, true)?;
    Ok(config)
}

/// Our config from PEFT's JSON, refusing what we would load wrong.
fn lora_config_from_peft(text: &str) -> std::result::Result<LoraConfig, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let obj = v.as_object().ok_or("not a JSON object")?;
    let field = |k: &str| obj.get(k).filter(|v| !v.is_null());
    match field("peft_type").and_then(Value::as_str) {
        Some("LORA") => {}
        other => return Err(format!("peft_type {other:?} is not \"LORA\"")),
    }
    let mut problems = Vec::new();
    let mut refuse = |k: &str, ok: &dyn Fn(&Value) -> bool, why: &str| {
        if let Some(v) = field(k).filter(|v| !ok(v)) {
            problems.push(format!("{k} = {v} is not supported ({why})"));
        }
    };
    let empty = |v: &Value| v.as_object().is_some_and(|m| m.is_empty());
    let is_false = |v: &Value| v == &Value::Bool(false);
    refuse("bias", &|v| v == "none", "only \"none\"");
    refuse("fan_in_fan_out", &is_false, "weights are [out, in]");
    refuse("use_dora", &is_false, "no DoRA");
    refuse(
        "modules_to_save",
        &|v| v.as_array().is_some_and(|a| a.is_empty()),
        "adapters only",
    );
    refuse("layers_to_transform", &|_| false, "every layer is adapted");
    refuse("rank_pattern", &empty, "one rank for all");
    refuse("alpha_pattern", &empty, "one alpha for all");
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let number = |k: &str, default: f64| -> std::result::Result<f64, String> {
        match field(k) {
            None => Ok(default),
            Some(v) => v.as_f64().ok_or(format!("{k} = {v} is not a number")),
        }
    };
    let rank = match field("r") {
        None => 8,
        Some(v) => v
            .as_u64()
            .and_then(|r| usize::try_from(r).ok())
            .ok_or(format!("r = {v} is not a rank"))?,
    };
    let targets = match field("target_modules") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| {
                t.as_str()
                    .map(str::to_string)
                    .ok_or(format!("target {t} is not a name"))
            })
            .collect::<std::result::Result<Vec<_>, _>>()?,
        Some(Value::String(s)) => {
            return Err(format!(
                "target_modules as a pattern ({s:?}) is not supported; list the modules ({})",
                LORA_TARGETS.join(", ")
            ))
        }
        _ => return Err("target_modules is missing".into()),
    };
    let config = LoraConfig {
        rank,
        alpha: number("lora_alpha", 8.0)?,
        dropout: number("lora_dropout", 0.0)?,
        targets,
        use_rslora: field("use_rslora")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        seed: 0,
    };
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}
