//! LoRA files for Stable Diffusion, merged into the weights at load with a strength, as
//! diffusers' `load_lora_weights` + `fuse_lora(lora_scale)` does. Two layouts:
//!
//! - diffusers / PEFT (`save_lora_weights`): `unet.<module>.lora_A.weight` and `.lora_B.weight`,
//!   `text_encoder.<module>...` (SDXL's second: `text_encoder_2.`); scale 1, or alpha / rank
//!   where an `.alpha` is stored or the file's `lora_adapter_metadata` (the adapters'
//!   LoraConfig, which newer diffusers writes) gives `lora_alpha` and its `alpha_pattern`;
//! - kohya's sd-scripts: `lora_unet_<module with _>.lora_down.weight`, `.lora_up.weight` and
//!   `.alpha`, `lora_te_<...>` for the text encoder (SDXL's: `lora_te1_`, `lora_te2_`); scale
//!   alpha / rank.
//!
//! W ← W + strength · scale · up @ down, for linear layers and convolutions (the product over
//! the flattened kernel). A module the model lacks, or of another shape, is an error that names
//! it: a LoRA for another base model never half-applies.
//!
//! `save_lora` writes a trained model's adapters in the diffusers / PEFT layout.

use crate::nn::Module;
use crate::{no_grad, Error, Result, Tensor};
use std::collections::BTreeMap;
use std::path::Path;

/// Which model of the pipeline a LoRA module adapts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LoraTarget {
    /// The denoiser: a UNet, or SD3's or FLUX's transformer.
    Denoiser,
    /// The pipeline's first (0) or second (1, SDXL's `text_encoder_2`) text encoder.
    TextEncoder(usize),
}

/// One module's low-rank update.
pub struct LoraModule {
    pub target: LoraTarget,
    /// The module's name as the file gives it (dotted, or kohya's with underscores).
    pub module: String,
    /// [rank, in, ...] and [out, rank, ...].
    pub down: Tensor,
    pub up: Tensor,
    pub alpha: Option<f64>,
}

impl LoraModule {
    pub fn rank(&self) -> usize {
        self.down.shape()[0]
    }

    /// alpha / rank, or 1 without an alpha.
    pub fn scale(&self) -> f64 {
        self.alpha.map_or(1.0, |a| a / self.rank() as f64)
    }
}

/// The modules of a LoRA file, by layout.
pub fn read_lora(path: &Path) -> Result<Vec<LoraModule>> {
    let bad = |msg: String| Error::format("LoRA", format!("{}: {msg}", path.display()));
    let (tensors, metadata) = match path.extension().and_then(|e| e.to_str()) {
        Some("safetensors") => {
            let loaded = crate::io::safetensors::load_with_metadata(path)?;
            let metadata = match loaded.metadata.get("lora_adapter_metadata") {
                Some(text) => Some(
                    serde_json::from_str::<serde_json::Value>(text)
                        .map_err(|e| bad(format!("lora_adapter_metadata: {e}")))?,
                ),
                None => None,
            };
            (loaded.tensors, metadata)
        }
        _ => (crate::io::load(path)?, None),
    };
    // module → (target, down, up, alpha)
    let mut parts: BTreeMap<(LoraTarget, String), [Option<Tensor>; 3]> = BTreeMap::new();
    for (key, t) in &tensors {
        const PREFIXES: [(&str, LoraTarget); 8] = [
            ("unet.", LoraTarget::Denoiser),
            ("transformer.", LoraTarget::Denoiser),
            ("text_encoder.", LoraTarget::TextEncoder(0)),
            ("text_encoder_2.", LoraTarget::TextEncoder(1)),
            ("lora_unet_", LoraTarget::Denoiser),
            ("lora_te_", LoraTarget::TextEncoder(0)),
            ("lora_te1_", LoraTarget::TextEncoder(0)),
            ("lora_te2_", LoraTarget::TextEncoder(1)),
        ];
        let Some((target, rest)) = PREFIXES
            .iter()
            .find_map(|(p, target)| key.strip_prefix(p).map(|r| (*target, r)))
        else {
            return Err(bad(format!(
                "`{key}` is not a Stable Diffusion LoRA tensor (unet./transformer./text_encoder./text_encoder_2. or lora_unet_/lora_te_/lora_te1_/lora_te2_)"
            )));
        };
        let (module, slot) = [
            (".lora_A.weight", 0),
            (".lora_down.weight", 0),
            (".lora_B.weight", 1),
            (".lora_up.weight", 1),
            (".alpha", 2),
        ]
        .iter()
        .find_map(|(suffix, slot)| rest.strip_suffix(suffix).map(|m| (m, *slot)))
        .ok_or_else(|| {
            bad(format!(
                "`{key}` is neither a LoRA down, up nor alpha tensor"
            ))
        })?;
        parts.entry((target, module.to_string())).or_default()[slot] = Some(t.clone());
    }
    parts
        .into_iter()
        .map(|((target, module), [down, up, alpha])| {
            let (Some(down), Some(up)) = (down, up) else {
                return Err(bad(format!("{module} lacks its down or up weight")));
            };
            let alpha = alpha
                .map(|a| a.to_vec_f64())
                .transpose()?
                .and_then(|v| v.first().copied());
            if down.rank() < 2 || up.rank() < 2 || up.shape()[1] != down.shape()[0] {
                return Err(bad(format!(
                    "{module}: down {:?} and up {:?} do not share a rank",
                    down.shape(),
                    up.shape()
                )));
            }
            let alpha = match (alpha, &metadata) {
                (Some(a), _) => Some(a),
                (None, Some(meta)) => metadata_alpha(meta, target, &module, down.shape()[0])
                    .map_err(|e| bad(format!("lora_adapter_metadata: {e}")))?,
                (None, None) => None,
            };
            Ok(LoraModule {
                target,
                module,
                down,
                up,
                alpha,
            })
        })
        .collect()
}

/// A module's alpha from the adapters' LoraConfig as diffusers stores it (`unet.lora_alpha`,
/// `unet.alpha_pattern`, ...), as PEFT reads it: the first `alpha_pattern` key that names the
/// module (the whole name, or its last dotted parts, as a regular expression), else
/// `lora_alpha`; with `use_rslora` the scale is alpha / sqrt(rank), given here as the alpha
/// that makes alpha / rank that scale. `None` when the config says nothing of this model.
fn metadata_alpha(
    meta: &serde_json::Value,
    target: LoraTarget,
    module: &str,
    rank: usize,
) -> std::result::Result<Option<f64>, String> {
    // diffusers keys a UNet's config `unet.`, an SD3 or FLUX transformer's `transformer.`.
    let prefixes: &[&str] = match target {
        LoraTarget::Denoiser => &["unet", "transformer"],
        LoraTarget::TextEncoder(0) => &["text_encoder"],
        LoraTarget::TextEncoder(_) => &["text_encoder_2"],
    };
    let Some(prefix) = prefixes
        .iter()
        .find(|p| meta.get(format!("{p}.lora_alpha")).is_some())
    else {
        return Ok(None);
    };
    let field = |name: &str| meta.get(format!("{prefix}.{name}"));
    let Some(alpha) = field("lora_alpha") else {
        return Ok(None);
    };
    let mut alpha = alpha
        .as_f64()
        .ok_or_else(|| format!("{prefix}.lora_alpha is {alpha}, not a number"))?;
    if let Some(patterns) = field("alpha_pattern").and_then(|p| p.as_object()) {
        for (key, value) in patterns {
            let re = regex::Regex::new(&format!(r"^(.*\.)?({key})$"))
                .map_err(|e| format!("{prefix}.alpha_pattern key `{key}`: {e}"))?;
            if re.is_match(module) {
                alpha = value.as_f64().ok_or_else(|| {
                    format!("{prefix}.alpha_pattern `{key}` is {value}, not a number")
                })?;
                break;
            }
        }
    }
    if field("use_rslora").and_then(|v| v.as_bool()) == Some(true) {
        alpha *= (rank as f64).sqrt();
    }
    Ok(Some(alpha))
}

/// Where each module of a LoRA file goes in one model, checked: every module names one of the
/// model's weights, with its shape. Nothing is changed until `apply`.
pub struct LoraPlan<'a> {
    /// The weight, the module, and the update's [out, rank] x [rank, rest] shape.
    merges: Vec<(Tensor, &'a LoraModule, usize, usize, usize)>,
}

/// Places the modules in `model` (the UNet or the text encoder), or names the first that does
/// not fit it.
pub fn plan_lora<'a>(model: &dyn Module, modules: &[&'a LoraModule]) -> Result<LoraPlan<'a>> {
    let params: BTreeMap<String, Tensor> = model.named_parameters().into_iter().collect();
    // kohya names modules with underscores for the dots.
    let by_underscores: BTreeMap<String, &String> = params
        .keys()
        .filter_map(|n| n.strip_suffix(".weight").map(|m| (m.replace('.', "_"), n)))
        .collect();
    let mut planned = Vec::new();
    for m in modules {
        let dotted = match m.target {
            // Text encoders' files name modules with or without transformers' `text_model.`.
            LoraTarget::TextEncoder(_) if !m.module.starts_with("text_model") => {
                format!("text_model.{}.weight", m.module)
            }
            _ => format!("{}.weight", m.module),
        };
        let name = match params.contains_key(&dotted) {
            true => dotted,
            false => by_underscores
                .get(&m.module)
                .map(|n| n.to_string())
                .ok_or_else(|| {
                    Error::invalid(
                        "LoRA",
                        format!(
                            "{} has no module {} (a LoRA for another base model?)",
                            model.title(),
                            m.module
                        ),
                    )
                })?,
        };
        let w = &params[&name];
        let out = w.shape()[0];
        let rest: usize = w.shape()[1..].iter().product();
        let (r, down_rest) = (m.rank(), m.down.numel() / m.rank());
        if m.up.shape()[0] != out || down_rest != rest || m.up.numel() != out * r {
            return Err(Error::invalid(
                "LoRA",
                format!(
                    "{}: up {:?} and down {:?} do not fit the weight {:?} (a LoRA for another base model?)",
                    m.module,
                    m.up.shape(),
                    m.down.shape(),
                    w.shape()
                ),
            ));
        }
        planned.push((w.clone(), *m, out, r, rest));
    }
    Ok(LoraPlan { merges: planned })
}

impl LoraPlan<'_> {
    /// W ← W + strength · scale · up @ down for every planned module; returns how many.
    pub fn apply(&self, strength: f64) -> Result<usize> {
        no_grad(|| {
            for (w, m, out, r, rest) in &self.merges {
                let up =
                    m.up.to(w.device(), crate::DType::F32)?
                        .reshape_to(&[*out, *r])?;
                let down = m
                    .down
                    .to(w.device(), crate::DType::F32)?
                    .reshape_to(&[*r, *rest])?;
                let delta = up
                    .matmul(&down)?
                    .mul_scalar(strength * m.scale())?
                    .reshape_to(w.shape())?
                    .to_dtype(w.dtype())?;
                w.add_(&delta)?;
            }
            Ok::<(), Error>(())
        })?;
        Ok(self.merges.len())
    }
}

/// The LoRA adapters of a model (a UNet, a text encoder) as diffusers' `load_lora_weights`
/// reads them: `{prefix}.{layer}.lora_A.weight` [rank, in] and `.lora_B.weight` [out, rank],
/// F32 on the host, with each adapter's scale (alpha / rank) folded into B, so the file needs
/// no alphas (diffusers then takes alpha = rank: a scale of 1).
pub fn lora_state_dict(model: &mut dyn Module, prefix: &str) -> Result<BTreeMap<String, Tensor>> {
    let mut out = BTreeMap::new();
    model.for_each_linear_mut("", &mut |name, linear| {
        if let Some(lora) = linear.lora() {
            let host = |t: &Tensor| t.to_device(crate::Device::Cpu)?.to_dtype(crate::DType::F32);
            let b = no_grad(|| host(&lora.b)?.mul_scalar(lora.spec().scale))?;
            out.insert(
                format!("{prefix}.{name}.lora_A.weight"),
                host(&lora.a)?.contiguous()?,
            );
            out.insert(format!("{prefix}.{name}.lora_B.weight"), b.contiguous()?);
        }
        Ok(())
    })?;
    Ok(out)
}

/// Writes `lora_state_dict(model, prefix)` to a safetensors file; returns how many layers it
/// holds. A model without adapters is refused (the file would change nothing).
pub fn save_lora(model: &mut dyn Module, prefix: &str, path: &Path) -> Result<usize> {
    let state = lora_state_dict(model, prefix)?;
    if state.is_empty() {
        return Err(Error::invalid(
            "save_lora",
            "the model has no LoRA adapters to save",
        ));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    crate::io::safetensors::save(path, &state, Some(meta))?;
    Ok(state.len() / 2)
}
