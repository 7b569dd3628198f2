//! A family's checkpoint layout where it differs from the model's own: Phi-3 stores q, k and
//! v as one projection (`qkv_proj`) and the gate and up as another (`gate_up_proj`), which
//! the model holds apart (the kernels, adapters and exporters take them one by one). Loading
//! splits them (`ParamSource::fused_linears`); saving joins them here.

use super::{LmConfig, TransformerLm};
use crate::{no_grad, Error, Result, Tensor};
use std::collections::BTreeMap;

/// The projections a fused checkpoint joins: (module, parts in row order, the joined name).
const FUSED: [(&str, &[&str], &str); 2] = [
    ("self_attn", &["q_proj", "k_proj", "v_proj"], "qkv_proj"),
    ("mlp", &["gate_proj", "up_proj"], "gate_up_proj"),
];

/// `named` (the model's names, in its order) in the family's checkpoint layout: each fused
/// group joined by rows where its first part stood. Works for weights and their gradients.
pub fn to_checkpoint_layout(
    config: &LmConfig,
    named: Vec<(String, Tensor)>,
) -> Result<Vec<(String, Tensor)>> {
    if !config.family.fused_projections() {
        return Ok(named);
    }
    let by_name: BTreeMap<&str, &Tensor> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut out = Vec::with_capacity(named.len());
    for (name, t) in &named {
        let group = FUSED.iter().find_map(|(module, parts, joined)| {
            parts.iter().enumerate().find_map(|(i, part)| {
                let stem = name.strip_suffix(&format!("{module}.{part}.weight"))?;
                Some((i, stem, *module, *parts, *joined))
            })
        });
        match group {
            None => out.push((name.clone(), t.clone())),
            Some((0, stem, module, parts, joined)) => {
                let tensors = parts
                    .iter()
                    .map(|p| {
                        let key = format!("{stem}{module}.{p}.weight");
                        by_name.get(key.as_str()).map(|t| (*t).clone()).ok_or_else(|| {
                            Error::invalid("checkpoint layout", format!("{key} is missing"))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let fused = no_grad(|| Tensor::cat(&tensors, 0))?;
                out.push((format!("{stem}{module}.{joined}.weight"), fused));
            }
            Some(_) => {}
        }
    }
    Ok(out)
}

impl TransformerLm {
    /// The dense weights in the names and layout of the family's checkpoints, as
    /// transformers' `save_pretrained` writes them.
    pub fn checkpoint_state(&self) -> Result<Vec<(String, Tensor)>> {
        to_checkpoint_layout(&self.config, self.dense_state()?)
    }
}
