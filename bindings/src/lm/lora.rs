//! LoRA from scripts: `lm::lora(model, #{ rank, alpha, dropout, targets, rslora, seed })` puts
//! adapters on the model (freezing the rest, so `model.parameters()` is then the adapters),
//! `model.merge_lora()`, and PEFT's adapter directories (`model.save_adapter(dir)`,
//! `lm::load_adapter(model, dir)`).

use super::model::Lm;
use crate::error::{guard, RhaiResult};
use rhai::{Map, INT};
use rusting_brain::models::transformer_lm::{peft, LoraConfig};

crate::options! {
    struct LoraOptions {
        rank: usize = LoraConfig::default().rank,
        // PEFT's default alpha is 8 whatever the rank; twice the rank is the common choice.
        alpha: f64 = LoraConfig::default().alpha,
        dropout: f64 = LoraConfig::default().dropout,
        targets: Vec<String> = LoraConfig::default().targets,
        rslora: bool = false,
        seed: INT = 0,
    }
}

/// Adds adapters to `m` in place and returns the same model.
pub fn lora(m: Lm, opts: Map) -> RhaiResult<Lm> {
    let o = LoraOptions::parse("lm::lora", opts)?;
    let config = LoraConfig {
        rank: o.rank,
        alpha: o.alpha,
        dropout: o.dropout,
        targets: o.targets,
        use_rslora: o.rslora,
        seed: o.seed as u64,
    };
    guard(|| m.lock().add_lora(config))?;
    Ok(m)
}

pub fn merge_lora(m: &mut Lm) -> RhaiResult<()> {
    guard(|| m.lock().merge_lora())
}

crate::options! {
    struct SaveAdapterOptions {
        base_model: String,
    }
}

pub fn save_adapter(m: &mut Lm, dir: &str, opts: Map) -> RhaiResult<String> {
    let base = SaveAdapterOptions::parse("save_adapter", opts)?.base_model;
    guard(|| peft::save_adapter(&m.lock(), dir, base.as_deref()))?;
    Ok(dir.to_string())
}

/// Adds the adapters saved in `dir` to `m` in place and returns the same model.
pub fn load_adapter(m: Lm, dir: &str) -> RhaiResult<Lm> {
    guard(|| peft::load_adapter(&mut m.lock(), dir))?;
    Ok(m)
}

/// `#{ rank, alpha, dropout, targets, rslora }` of the model's adapters, or () without any.
pub fn lora_config(m: &mut Lm) -> rhai::Dynamic {
    let model = m.lock();
    let Some(c) = model.lora_config() else {
        return rhai::Dynamic::UNIT;
    };
    let mut out = Map::new();
    out.insert("rank".into(), (c.rank as INT).into());
    out.insert("alpha".into(), c.alpha.into());
    out.insert("dropout".into(), c.dropout.into());
    let targets: rhai::Array = c.targets.iter().map(|t| t.clone().into()).collect();
    out.insert("targets".into(), targets.into());
    out.insert("rslora".into(), c.use_rslora.into());
    out.into()
}
