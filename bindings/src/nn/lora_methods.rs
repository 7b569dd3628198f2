//! LoRA on any model from scripts: `model.lora(#{ targets, rank, alpha, dropout, train_also,
//! seed })` adapts the linear layers the targets name (PEFT's `target_modules`), freezing the
//! rest except `train_also` (PEFT's `modules_to_save`); `model.merge_lora()` folds them back.
//! The language models keep their own `lm::lora`, which also writes PEFT adapter folders.

use super::modules::Model;
use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use rhai::{Array, Map, INT};
use rusting_brain::nn::lora_targets::{add_lora, merge_lora};
use rusting_brain::nn::LoraSpec;

crate::options! {
    struct LoraOptions {
        targets: Vec<String> = Vec::new(),
        rank: usize = 8,
        alpha: f64 = 2.0 * rank as f64,
        dropout: f64 = 0.0,
        train_also: Vec<String> = Vec::new(),
        seed: INT = 0,
    }
}

fn lora(model: &mut Model, opts: Map) -> RhaiResult<Array> {
    let LoraOptions {
        targets,
        rank,
        alpha,
        dropout,
        train_also,
        seed,
    } = LoraOptions::parse("model.lora", opts)?;
    if targets.is_empty() {
        return Err(runtime_error(
            "model.lora needs targets: the linear layers to adapt by name, e.g. #{ targets: [\"query\", \"value\"] }",
        ));
    }
    let spec = LoraSpec {
        rank,
        scale: alpha / rank.max(1) as f64,
        dropout,
    };
    let seed = seed as u64;
    let mut guard_ = model.lock();
    let adapted = guard(|| add_lora(guard_.as_mut(), &targets, &train_also, spec, seed))?;
    Ok(adapted.into_iter().map(Into::into).collect())
}

pub fn register(api: &mut Api) {
    api.method(
        "lora",
        "model.lora(#{ targets, rank, alpha, dropout, train_also, seed }) -> array",
        "Adds LoRA adapters (rank 8, alpha twice the rank, PEFT's initialisation) to every linear layer whose dotted name is a target or ends in .target (PEFT's target_modules: \"query\" and \"value\" in a ViT), freezes every other parameter except those under the train_also names (PEFT's modules_to_save, e.g. [\"classifier\"]), and returns the adapted layers' names. Make the optimizer afterwards, over model.parameters(): the frozen ones are left out.",
        "let m = nn::sequential([nn::linear(4, 8), nn::activation(\"relu\"), nn::linear(8, 2)]); print(m.lora(#{ targets: [\"0\"], rank: 2, train_also: [\"2\"] }));",
        lora,
    );
    api.method(
        "merge_lora",
        "model.merge_lora() -> int",
        "Folds every LoRA adapter into its layer's weight (W += B·A·alpha/rank) and drops it; returns how many there were. The outputs stay the same; the layers then save under their own names.",
        "let m = nn::sequential([nn::linear(4, 2)]); m.lora(#{ targets: [\"0\"] }); print(m.merge_lora());",
        |model: &mut Model| -> RhaiResult<rhai::INT> {
            let mut g = model.lock();
            guard(|| merge_lora(g.as_mut())).map(|n| n as rhai::INT)
        },
    );
}
