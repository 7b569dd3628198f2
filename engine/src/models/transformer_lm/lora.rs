//! LoRA fine-tuning of a `TransformerLm`: `add_lora` freezes every weight and puts an adapter
//! (`nn::LoraAdapter`) on the projections it names, PEFT's `target_modules`; an optimizer
//! made over `trainable_parameters()` afterwards trains the adapters alone. `merge_lora`
//! folds them into the weights, leaving a plain model. PEFT's files are `peft.rs`.

use super::TransformerLm;
use crate::nn::{LoraSpec, Module};
use crate::{DType, Device, Error, Generator, Result, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The projections an adapter can target, in Hugging Face's module names.
pub const LORA_TARGETS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// Where adapters go and how strong they are, as PEFT's `LoraConfig` has it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f64,
    pub dropout: f64,
    /// Module names from `LORA_TARGETS`; every layer's projection of that name is adapted.
    pub targets: Vec<String>,
    /// rsLoRA: scale alpha / sqrt(rank) instead of alpha / rank.
    #[serde(default)]
    pub use_rslora: bool,
    /// Draws the A factors (and the dropout masks).
    #[serde(default)]
    pub seed: u64,
}

impl Default for LoraConfig {
    /// PEFT's defaults for a LLaMA model: rank 8, alpha 8, on q_proj and v_proj.
    fn default() -> Self {
        LoraConfig {
            rank: 8,
            alpha: 8.0,
            dropout: 0.0,
            targets: vec!["q_proj".into(), "v_proj".into()],
            use_rslora: false,
            seed: 0,
        }
    }
}

impl LoraConfig {
    pub fn scale(&self) -> f64 {
        if self.use_rslora {
            self.alpha / (self.rank as f64).sqrt()
        } else {
            self.alpha / self.rank as f64
        }
    }

    pub fn spec(&self) -> LoraSpec {
        LoraSpec {
            rank: self.rank,
            scale: self.scale(),
            dropout: self.dropout,
        }
    }

    /// Every problem at once: the sizes, and each target that names no projection.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        if let Err(e) = self.spec().validate() {
            problems.push(e.to_string());
        }
        if !self.alpha.is_finite() {
            problems.push(format!("alpha must be finite, got {}", self.alpha));
        }
        if self.targets.is_empty() {
            problems.push("targets is empty".to_string());
        }
        for t in &self.targets {
            if !LORA_TARGETS.contains(&t.as_str()) {
                problems.push(format!(
                    "unknown target `{t}` (the projections are {})",
                    LORA_TARGETS.join(", ")
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid("lora", problems.join("; ")))
        }
    }

    pub fn adapts(&self, module: &str) -> bool {
        self.targets.iter().any(|t| t == module)
    }
}

/// True for the names of adapter tensors in a state dict.
pub fn is_adapter_name(name: &str) -> bool {
    name.contains(".lora_A.") || name.contains(".lora_B.")
}

impl TransformerLm {
    /// Freezes every parameter and adds an adapter to each targeted projection of every
    /// layer. Make the optimizer afterwards, over `trainable_parameters()`.
    pub fn add_lora(&mut self, config: LoraConfig) -> Result<()> {
        config.validate()?;
        if self.lora.is_some() {
            return Err(Error::invalid(
                "lora",
                "the model already has LoRA adapters (merge_lora() them first)",
            ));
        }
        for p in self.parameters() {
            p.set_grad(None);
            p.set_requires_grad(false)?;
        }
        let mut gen = Generator::new(config.seed);
        let spec = config.spec();
        for (_, module, linear) in self.projections_mut() {
            if config.adapts(module) {
                linear.add_lora(spec, &mut gen)?;
            }
        }
        self.lora = Some(config);
        Ok(())
    }

    pub fn lora_config(&self) -> Option<&LoraConfig> {
        self.lora.as_ref()
    }

    /// Folds every adapter into its weight and drops it; the model trains all its parameters
    /// again, as a model made by `new` does. Without adapters this is an error.
    pub fn merge_lora(&mut self) -> Result<()> {
        if self.lora.is_none() {
            return Err(Error::invalid(
                "merge_lora",
                "the model has no LoRA adapters",
            ));
        }
        for (_, _, linear) in self.projections_mut() {
            linear.merge_lora()?;
        }
        self.lora = None;
        for p in self.parameters() {
            p.set_requires_grad(true)?;
        }
        Ok(())
    }

    /// A model over named tensors that may hold adapters too (a training checkpoint saved
    /// with LoRA, or `with_dtype` of an adapted model): the base is built from the other
    /// tensors, then `lora` adds the adapters and their values are copied in.
    pub(super) fn from_tensors_with_lora(
        config: super::LmConfig,
        tensors: &BTreeMap<String, Tensor>,
        lora: Option<&LoraConfig>,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        let Some(lora) = lora else {
            return Self::from_tensors(config, tensors, dtype, device);
        };
        let (adapters, base): (BTreeMap<_, _>, BTreeMap<_, _>) = tensors
            .iter()
            .map(|(n, t)| (n.clone(), t.clone()))
            .partition(|(n, _)| is_adapter_name(n));
        let mut model = Self::from_tensors(config, &base, dtype, device)?;
        model.add_lora(lora.clone())?;
        let own: BTreeMap<String, Tensor> = model
            .named_parameters()
            .into_iter()
            .filter(|(n, _)| is_adapter_name(n))
            .collect();
        crate::nn::load_named(own, &adapters, true)?;
        Ok(model)
    }
}
