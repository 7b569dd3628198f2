//! Quantized bases from scripts: `model.quantize("nf4")` keeps every projection (and an untied
//! head) in NF4, Q8_0, Q4_K or Q4_1 blocks, so `lm::lora` over it is QLoRA;
//! `model.quantized_layers()` says which layers are quantized and how.

use super::model::Lm;
use crate::error::{guard, runtime_error, RhaiResult};
use rhai::Map;
use rusting_brain::ops::quant_matmul::BlockFormat;

/// The formats a script names, lower case.
const FORMATS: [(&str, BlockFormat); 4] = [
    ("nf4", BlockFormat::Nf4),
    ("q8_0", BlockFormat::Q8_0),
    ("q4_k", BlockFormat::Q4_K),
    ("q4_1", BlockFormat::Q4_1),
];

fn format_of(name: &str) -> RhaiResult<BlockFormat> {
    let lower = name.to_ascii_lowercase();
    FORMATS
        .iter()
        .find(|(n, _)| *n == lower)
        .map(|&(_, f)| f)
        .ok_or_else(|| {
            let names: Vec<&str> = FORMATS.iter().map(|(n, _)| *n).collect();
            runtime_error(format!(
                "model.quantize: unknown format \"{name}\" (one of {})",
                names.join(", ")
            ))
        })
}

/// Quantizes the model's projections in place.
pub fn quantize(m: &mut Lm, format: &str) -> RhaiResult<()> {
    let format = format_of(format)?;
    guard(|| m.lock().quantize(format))
}

/// `#{ layer name: format name }` of the quantized layers (empty when none is).
pub fn quantized_layers(m: &mut Lm) -> Map {
    m.lock()
        .quantized_layers()
        .into_iter()
        .map(|(name, f)| (name.into(), f.name().to_ascii_lowercase().into()))
        .collect()
}
