//! A family's checkpoint layout where it differs from the model's own: Phi-3 stores q, k and
//! v as one projection (`qkv_proj`) and the gate and up as another (`gate_up_proj`), which
//! the model holds apart (the kernels, adapters and exporters take them one by one). Loading
//! splits them (`ParamSource::fused_linears`); saving joins them here. The mixture-of-experts
//! families go the other way: the model stacks each layer's experts (`mlp.experts.gate_up_proj`
//! [experts, 2 * hidden, d], as transformers 5 holds them) and their files keep one tensor per
//! expert and projection (`mlp.experts.3.gate_proj.weight`; Mixtral's
//! `block_sparse_moe.experts.3.w1.weight` and `block_sparse_moe.gate.weight`), which saving
//! writes here and loading stacks (`ParamSource::experts`).

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
    if config.family.is_moe() {
        return unstack_experts(config, named);
    }
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
                        by_name
                            .get(key.as_str())
                            .map(|t| (*t).clone())
                            .ok_or_else(|| {
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

/// Each layer's stacked experts as one tensor per expert and projection, under the family's
/// checkpoint names.
fn unstack_experts(
    config: &LmConfig,
    named: Vec<(String, Tensor)>,
) -> Result<Vec<(String, Tensor)>> {
    let (module, [gate, up, down]) = config.family.expert_names();
    let mut out = Vec::with_capacity(named.len());
    for (name, t) in named {
        let (stem, which) = match (
            name.strip_suffix("mlp.experts.gate_up_proj"),
            name.strip_suffix("mlp.experts.down_proj"),
            name.strip_suffix("mlp.gate.weight"),
        ) {
            (Some(stem), _, _) => (stem.to_string(), 0),
            (_, Some(stem), _) => (stem.to_string(), 1),
            (_, _, Some(stem)) => {
                out.push((format!("{stem}{module}.gate.weight"), t));
                continue;
            }
            _ => {
                out.push((name, t));
                continue;
            }
        };
        let experts = t.shape()[0];
        for e in 0..experts {
            let one = t.narrow(0, e, 1)?.squeeze(0)?;
            let key = |part: &str| format!("{stem}{module}.experts.{e}.{part}.weight");
            if which == 0 {
                let h = one.shape()[0] / 2;
                out.push((key(gate), no_grad(|| one.narrow(0, 0, h)?.contiguous())?));
                out.push((key(up), no_grad(|| one.narrow(0, h, h)?.contiguous())?));
            } else {
                out.push((key(down), no_grad(|| one.contiguous())?));
            }
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
