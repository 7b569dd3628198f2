//! Weights of a YOLO network: loading a state dict by ultralytics' names (every problem
//! reported at once), folding batch norms into convolutions (`fuse`), and our own safetensors
//! files, which carry the model YAML and the class names in their metadata so a file alone
//! rebuilds the model.

use super::conv::BN_EPS;
use super::network::YoloModel;
use super::saved::{described_model, model_metadata, EMA_PREFIX, META_TRAIN};
use crate::nn::{Module, NameReport};
use crate::{io, Device, Error, Generator, Result, Tensor};
use std::collections::BTreeMap;
use std::path::Path;

impl YoloModel {
    /// Copies a state dict with ultralytics' names into this network. Missing, unexpected and
    /// mis-shaped entries are all listed in one error, and nothing is written unless all fit.
    pub fn load_weights(&self, state: &BTreeMap<String, Tensor>, origin: &str) -> Result<()> {
        let own = self.state_dict();
        let report = NameReport::compare(
            own.iter().map(|(n, t)| (n.as_str(), t.shape())),
            state.iter().map(|(n, t)| (n.as_str(), t.shape())),
        );
        if let Some(problems) = report.message() {
            return Err(Error::invalid(
                "yolo weights",
                format!(
                    "{origin} does not fit this {} model ({}): {problems}",
                    self.describe(),
                    if self.fused { "fused" } else { "unfused" },
                ),
            ));
        }
        self.load_state_dict(state, true)?;
        Ok(())
    }

    /// The inference form: every batch norm folded into the convolution before it. The new
    /// network is in eval mode on the same device.
    pub fn fuse(&self) -> Result<YoloModel> {
        let device = self.device();
        let mut fused = YoloModel::build(
            &self.config,
            self.names.clone(),
            true,
            &mut Generator::new(0),
        )?;
        let state = if self.fused {
            self.state_dict()
        } else {
            fold_batch_norms(&self.state_dict())?
        };
        // On the device first: the state dict lives there, and a copy never crosses devices.
        fused.to_device(device)?;
        fused.load_weights(&state, "the unfused network")?;
        fused.eval();
        Ok(fused)
    }

    pub fn device(&self) -> Device {
        self.named_parameters()
            .first()
            .map(|(_, t)| t.device())
            .unwrap_or(Device::Cpu)
    }

    /// e.g. "yolo11 scale n, 80 classes".
    pub fn describe(&self) -> String {
        let family = self.config.source["yaml_file"]
            .as_str()
            .and_then(|f| {
                Path::new(f)
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "YOLO".into());
        match &self.config.scale {
            Some(s) => format!("{family} (scale {s}, {} classes)", self.nc()),
            None => format!("{family} ({} classes)", self.nc()),
        }
    }

    /// Writes the weights, the model YAML and the class names to a safetensors file.
    pub fn save_safetensors(&self, path: &Path) -> Result<()> {
        io::save(path, &self.state_dict(), Some(model_metadata(self)?))
    }

    /// Rebuilds a network from a safetensors file written by `save_safetensors`, or from a
    /// training checkpoint (`last.safetensors`, its EMA weights).
    pub fn load_safetensors(path: &Path) -> Result<YoloModel> {
        let origin = path.display().to_string();
        let loaded = io::load_with_metadata(path)?;
        let (config, names, fused) = described_model(&loaded.metadata, &origin)?;
        // A training checkpoint also holds the optimizer and the EMA: like ultralytics, take
        // the EMA's weights.
        let weights: BTreeMap<String, Tensor> = if loaded.metadata.contains_key(META_TRAIN) {
            loaded
                .tensors
                .iter()
                .filter_map(|(k, t)| Some((k.strip_prefix(EMA_PREFIX)?.to_string(), t.clone())))
                .collect()
        } else {
            loaded.tensors
        };
        let mut model = YoloModel::build_for_weights(&config, names, fused, &weights)?;
        model.load_weights(&weights, &origin)?;
        model.eval();
        Ok(model)
    }
}

/// Folds `P.bn.*` into `P.conv.weight` and a new `P.conv.bias`:
/// w' = w * g / sqrt(v + eps), b' = beta - m * g / sqrt(v + eps).
pub fn fold_batch_norms(state: &BTreeMap<String, Tensor>) -> Result<BTreeMap<String, Tensor>> {
    let mut out = BTreeMap::new();
    let get = |k: &str| {
        state
            .get(k)
            .ok_or_else(|| Error::invalid("yolo fuse", format!("no `{k}` beside a batch norm")))
    };
    for (name, t) in state {
        if name.contains(".bn.") {
            continue;
        }
        if let Some(prefix) = name.strip_suffix(".conv.weight") {
            let bn = format!("{prefix}.bn");
            if state.contains_key(&format!("{bn}.weight")) {
                let gamma = get(&format!("{bn}.weight"))?.to_dtype(crate::DType::F32)?;
                let beta = get(&format!("{bn}.bias"))?.to_dtype(crate::DType::F32)?;
                let mean = get(&format!("{bn}.running_mean"))?.to_dtype(crate::DType::F32)?;
                let var = get(&format!("{bn}.running_var"))?.to_dtype(crate::DType::F32)?;
                let scale = gamma.mul(&var.add_scalar(BN_EPS)?.rsqrt()?)?;
                let o = scale.shape()[0];
                let w = t
                    .to_dtype(crate::DType::F32)?
                    .mul(&scale.reshape_to(&[o, 1, 1, 1])?)?;
                let b = beta.sub(&mean.mul(&scale)?)?;
                out.insert(name.clone(), w.detach());
                out.insert(format!("{prefix}.conv.bias"), b.detach());
                continue;
            }
        }
        out.insert(name.clone(), t.clone());
    }
    Ok(out)
}
